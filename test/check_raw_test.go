package test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestCheckerRawSequences: a driver engineer's deliberately bad sequences,
// written as raw MMIO and host-memory stores after a clean post, for the
// rules TestCheckerNamesEachBug does not reach through a provider bug. Each
// mistake is reported exactly once, with its rule id, and nothing else is
// reported; the clean sequences (arming a CQ twice without reading the
// event, ringing the same doorbell again) report nothing.
func TestCheckerRawSequences(t *testing.T) {
	// posted posts one clean signalled WRITE and waits for its CQE; it
	// returns the WQE's first WQEBB as the ring holds it.
	posted := func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint, bf bool) []byte {
		t.Helper()
		req.QP.SetBlueFlame(bf)
		oneWrite(t, w, req, rsp)
		bb := make([]byte, 64)
		require.NoError(t, w.Hosts[0].Mem.Read(req.QP.SQInfo().Addr, bb))
		return bb
	}
	store := func(w *testbed.World, off uint64, b []byte) {
		m := w.Hosts[0].CPU
		for i := 0; i+8 <= len(b); i += 8 {
			m.Store64(off+uint64(i), le64(b[i:]))
		}
		m.Flush()
		w.Settle(1 << 16)
	}
	tests := []struct {
		name, rule string // "" rule: a clean sequence
		drive      func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint)
	}{
		{"doorbell-not-last-ctrl", "R3", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			bb := posted(t, w, req, rsp, false)
			db := append([]byte(nil), bb[:8]...)
			db[0] ^= 0x01 // opmod: not what the ring's control segment holds
			info := req.QP.SQInfo()
			store(w, info.BFRegOffset+uint64(info.BFOffset), db)
		}},
		{"bf-not-in-memory", "R11", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			bb := posted(t, w, req, rsp, true)
			line := append([]byte(nil), bb...)
			line[16] ^= 0xff // the remote address segment: a WQE the ring does not hold
			info := req.QP.SQInfo()
			store(w, info.BFRegOffset+uint64(info.BFOffset), line)
		}},
		{"set-ci-backwards", "R9", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			oneWrite(t, w, req, rsp)
			oneWrite(t, w, req, rsp)
			var ci [4]byte
			// Two CQEs consumed (set_ci 2); the device last sampled set_ci
			// 1, when it wrote the second CQE. Rewound to 0, below what it
			// saw, at the third CQE it sees set_ci move backwards.
			binary.BigEndian.PutUint32(ci[:], 0)
			require.NoError(t, w.Hosts[0].Mem.Write(req.SendCQ.Info().DBRAddr, ci[:]))
			oneWrite(t, w, req, rsp)
		}},
		{"clean: arm twice without reading the event", "", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			require.NoError(t, req.SendCQ.ReqNotify(false))
			require.NoError(t, req.SendCQ.ReqNotify(false))
			oneWrite(t, w, req, rsp)
			require.NoError(t, req.SendCQ.ReqNotify(false))
			w.Settle(1 << 16)
		}},
		{"clean: the same doorbell rung twice", "", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			bb := posted(t, w, req, rsp, false)
			info := req.QP.SQInfo()
			store(w, info.BFRegOffset+uint64(info.BFOffset), bb[:8])
		}},
		{"clean: post lists and signalled WRITEs, BlueFlame off", "", func(t *testing.T, w *testbed.World, req, rsp *testbed.Endpoint) {
			req.QP.SetBlueFlame(false)
			sge := []provider.SGE{req.MR.SGE(0, 8)}
			for i := 0; i < 40; i++ {
				_, err := req.QP.PostSend([]provider.SendWR{
					{WRID: 1, Opcode: provider.WRRDMAWrite, SGL: sge, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey},
					{WRID: 2, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled, SGL: sge, RemoteAddr: rsp.Buf.Addr, RKey: rsp.MR.RKey}})
				require.NoError(t, err)
				_, err = testbed.Wait(req.SendCQ, 1)
				require.NoError(t, err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, req, rsp := checkWorld(t, checkCase{})
			tc.drive(t, w, req, rsp)
			var got []string
			for _, v := range w.Hosts[0].Dev.Checker().Violations() {
				got = append(got, v.Rule+" "+v.Name)
			}
			if tc.rule == "" {
				require.Empty(t, got)
			} else {
				require.Equal(t, []string{tc.rule + " " + tc.name}, got, "reported once, nothing else")
			}
			require.Empty(t, w.Hosts[1].Dev.Checker().Violations(), "the peer did nothing wrong")
		})
	}
}

// TestCheckerSeesEarlyDoorbell: a doorbell the plan delivers before its
// record is R1 to checked mode, once, as faults --explain says ("checked
// mode reports R1"); it used to report nothing, since the checker peeks the
// record the provider has already written. With faults.doorbell_reads_record
// the device takes the older counter and the WQE waits, which is the
// fault's doing, not the driver's: still R1 alone.
func TestCheckerSeesEarlyDoorbell(t *testing.T) {
	plan, err := fault.Parse([]byte(`{"rules":[{"point":"doorbell","action":"early","nth":1,"match":{"node":0}}]}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		reads   bool
		want    []string
		success bool
	}{
		{"doorbell authoritative", false, []string{"R1 doorbell-before-record"}, true},
		{"device reads the record", true, []string{"R1 doorbell-before-record"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, req, rsp := checkWorld(t, checkCase{cfg: func(c *testbed.Config) {
				c.Faults = plan
				c.Device.Faults.DoorbellReadsRecord = tc.reads
			}})
			writeWR(t, req, rsp, 1, 0, 64)
			wcs, _ := testbed.Wait(req.SendCQ, 1)
			w.Settle(1 << 20)
			var got []string
			for _, v := range w.Hosts[0].Dev.Checker().Violations() {
				got = append(got, v.Rule+" "+v.Name)
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.success, len(wcs) == 1 && wcs[0].Status == provider.WCSuccess)
		})
	}
}
