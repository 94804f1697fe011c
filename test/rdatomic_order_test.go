package test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestAtomicAckBehindReadResponses: an atomic that arrives while a long
// READ's responses are still being built is answered after them: the
// responder's responses leave in PSN order, as a requester expects (a
// later response means earlier ones were lost, rocev2.md §4.3).
func TestAtomicAckBehindReadResponses(t *testing.T) {
	all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
	w, req, rsp := faulty(t, testbed.ConnOpts{MTU: 1024, BufSize: 256 << 10, Access: all})
	var psns []uint32 // response PSNs in the order they left
	w.Link.AddTap(func(_ sim.Time, f []byte) {
		const bth = 14 + 20 + 8 // Ethernet, IPv4, UDP
		if len(f) < bth+12 {
			return
		}
		switch roce.Opcode(f[bth]) {
		case roce.OpRCReadResponseFirst, roce.OpRCReadResponseMiddle, roce.OpRCReadResponseLast,
			roce.OpRCReadResponseOnly, roce.OpRCAtomicAck:
			psns = append(psns, binary.BigEndian.Uint32(f[bth+8:])&0xffffff)
		}
	})
	const n = 64 << 10 // 64 responses: more than the responder builds ahead
	fill(rsp.Buf.Bytes[8:8+n], 0x5e)
	binary.LittleEndian.PutUint64(rsp.Buf.Bytes[0:], 100)
	_, err := req.QP.PostSend([]provider.SendWR{
		{WRID: 1, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(8, n)},
			RemoteAddr: rsp.MR.Addr + 8, RKey: rsp.MR.RKey},
		{WRID: 2, Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 8)},
			RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey, CompareAdd: 5},
	})
	require.NoError(t, err)
	wcs, err := testbed.Wait(req.SendCQ, 2)
	require.NoError(t, err)
	for _, wc := range wcs {
		require.Equal(t, provider.WCSuccess, wc.Status)
	}
	require.Equal(t, rsp.Buf.Bytes[8:8+n], req.Buf.Bytes[8:8+n])
	require.Equal(t, uint64(100), binary.LittleEndian.Uint64(req.Buf.Bytes[0:]))
	require.Equal(t, uint64(105), binary.LittleEndian.Uint64(rsp.Buf.Bytes[0:]))
	require.Len(t, psns, n/1024+1)
	for i := 1; i < len(psns); i++ {
		require.Equal(t, psns[i-1]+1, psns[i], "response %d left out of PSN order: %x", i, psns)
	}
	require.Zero(t, ctr(w, 0, device.CtrImpliedNAKSeqErr.String()))
	require.Zero(t, ctr(w, 1, device.CtrDuplicateRequest.String()))
}
