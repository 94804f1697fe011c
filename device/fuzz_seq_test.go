package device_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/testbed"
)

// seqOps are the opcodes a frame sequence draws from: every request a
// responder takes and every response a requester takes.
var seqOps = []roce.Opcode{
	roce.OpRCSendFirst, roce.OpRCSendMiddle, roce.OpRCSendLast, roce.OpRCSendLastImm, roce.OpRCSendOnly, roce.OpRCSendOnlyImm,
	roce.OpRCWriteFirst, roce.OpRCWriteMiddle, roce.OpRCWriteLast, roce.OpRCWriteLastImm, roce.OpRCWriteOnly, roce.OpRCWriteOnlyImm,
	roce.OpRCReadRequest, roce.OpRCCmpSwap, roce.OpRCFetchAdd,
	roce.OpRCReadResponseFirst, roce.OpRCReadResponseMiddle, roce.OpRCReadResponseLast, roce.OpRCReadResponseOnly,
	roce.OpRCAck, roce.OpRCAtomicAck,
}

// FuzzReceiveSequence aims sequences of well-formed frames at live QPs:
// requests at the responder, responses at a requester with WQEs in flight,
// with PSNs, lengths, keys and addresses the fuzzer chooses near the
// expected ones. Each 8-byte record is one frame: target and opcode, PSN
// offset, payload length, key/address perturbation, AETH syndrome. The
// device must not panic, must write nothing outside registered memory, and
// must not be left wedged: probe WRs in both directions afterwards
// complete, successfully or with an error.
func FuzzReceiveSequence(f *testing.F) {
	f.Add([]byte{0x04, 0, 8, 0, 0, 0x1f, 0, 0})                                  // SEND ONLY
	f.Add([]byte{0x06, 0, 0xff, 0, 0, 0, 0, 0, 0x07, 1, 0xff, 0, 0, 0, 0, 0})    // WRITE FIRST, MIDDLE
	f.Add([]byte{0x0c, 0, 0x40, 0, 0, 0, 0, 0, 0x0c, 0xff, 0x40, 0, 0, 0, 0, 0}) // READ, duplicate READ
	f.Add([]byte{0x0e, 0, 8, 0, 0, 0, 0, 0, 0x8f, 2, 8, 0, 0, 0x1f, 0, 0})       // at the requester: responses
	f.Add([]byte{0x93, 0, 0, 0, 0, 0x60, 0, 0, 0x93, 0, 0, 0, 0, 0x20, 0, 0})    // NAK, RNR NAK at the requester
	f.Add([]byte{0x0d, 0, 0, 0, 3, 0, 0, 0, 0x0e, 0x05, 0, 0, 0x80, 0x61, 0, 0}) // atomics, bad key
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 8*256 {
			return
		}
		cfg := testbed.DefaultConfig()
		w, err := testbed.New(cfg)
		if err != nil {
			t.Fatal(err) // the default world always builds: a failure here is a bug, not bad input
		}
		defer w.Close()
		all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
		eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 256, BufSize: 8192, Access: all, Timeout: 2, RetryCnt: 3, MinRNR: 1, RNRRetry: 3})
		if err != nil {
			t.Fatal(err)
		}
		// Guard buffers: host memory no MR covers. Nothing may touch them.
		var guards [2]provider.Buffer
		for i, e := range eps {
			if guards[i], err = e.Host.Ctx.AllocBuffer(8192, 4096); err != nil {
				t.Fatal(err)
			}
			for k := range guards[i].Bytes {
				guards[i].Bytes[k] = byte(k*7 + i)
			}
		}
		want := [2][]byte{append([]byte(nil), guards[0].Bytes...), append([]byte(nil), guards[1].Bytes...)}
		// Put node 0's requester to work so that responses meet WQEs in flight.
		req, rsp := eps[0], eps[1]
		_, _ = rsp.QP.PostRecv([]provider.RecvWR{{WRID: 1, SGL: []provider.SGE{rsp.MR.SGE(4096, 4096)}}})
		_, _ = req.QP.PostSend([]provider.SendWR{
			{WRID: 10, Opcode: provider.WRRDMARead, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(0, 1000)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey},
			{WRID: 11, Opcode: provider.WRAtomicFetchAdd, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(1024, 8)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey, CompareAdd: 1},
			{WRID: 12, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: []provider.SGE{req.MR.SGE(2048, 600)}, RemoteAddr: rsp.MR.Addr + 100, RKey: rsp.MR.RKey},
		})
		w.Eng.Run(20) // some of it is on the wire
		buf := make([]byte, 512)
		payload := make([]byte, 300)
		for len(data) >= 8 {
			r := data[:8]
			data = data[8:]
			toReq := r[0]&0x80 != 0 // at node 0 (responses) or node 1 (requests)
			op := seqOps[int(r[0]&0x7f)%len(seqOps)]
			dst, src := 1, 0
			if toReq {
				dst, src = 0, 1
			}
			// Near the PSN the target expects next: node 1's responder is
			// 3 requests into node 0's sends, node 0's requester awaits
			// answers from 0x1000 on.
			base := uint32(0x1000 + 3)
			if toReq {
				base = 0x1000
			}
			psn := roce.PSN(base + uint32(int8(r[1])))
			n := int(r[2]) + int(r[3]&1)<<8
			fp := roce.FrameParams{SrcMAC: testbed.MACs[src], DstMAC: testbed.MACs[dst], SrcIP: testbed.IPs[src], DstIP: testbed.IPs[dst], TTL: 64,
				BTH: roce.BTHFields{Opcode: op, PKey: 0xffff, DestQP: eps[dst].QP.QPN(), PSN: psn, AckReq: r[3]&2 != 0}}
			mr := eps[dst].MR
			va := mr.Addr + uint64(binary.LittleEndian.Uint16(r[6:8]))
			rkey := mr.RKey
			if r[4]&0x80 != 0 {
				rkey ^= uint32(r[4]) << 8
			}
			fp.RETH = roce.RETHFields{VA: va, RKey: rkey, DMALen: uint32(n) * uint32(1+r[4]&7)}
			fp.AtomicETH = roce.AtomicETHFields{VA: va &^ uint64(r[4]&0x40>>6*7), RKey: rkey, SwapAdd: 5, Compare: 0}
			fp.AETH = roce.AETHFields{Syndrome: roce.Syndrome(r[5]), MSN: uint32(r[4])}
			k, err := roce.BuildFrame(buf, &fp, payload[:min(n, len(payload))])
			if err != nil {
				continue
			}
			w.Hosts[dst].Dev.ReceiveFrame(w.Eng.Now(), buf[:k])
			w.Eng.Run(int(r[3] >> 2)) // let some of the answer happen in between
		}
		w.Eng.Run(200000)
		// Probes: one WR each way must complete, one way or another.
		for i, e := range eps {
			peer := eps[1-i]
			if _, err := e.QP.PostSend([]provider.SendWR{{WRID: 99, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{e.MR.SGE(0, 64)}, RemoteAddr: peer.MR.Addr, RKey: peer.MR.RKey}}); err != nil {
				t.Fatalf("probe post on node %d: %v", i, err)
			}
			for {
				wcs, err := testbed.Wait(e.SendCQ, 1)
				if errors.Is(err, testbed.ErrTimeout) {
					t.Fatalf("node %d: probe never completed: QP wedged", i)
				}
				if err != nil || wcs[0].WRID == 99 {
					break
				}
			}
		}
		for i := range guards {
			if !bytes.Equal(want[i], guards[i].Bytes) {
				t.Fatalf("node %d: memory outside every MR was written", i)
			}
		}
	})
}
