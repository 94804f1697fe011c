package device_test

import (
	"testing"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
)

// FuzzFaultPlanTraffic runs any plan the parser accepts against live
// traffic in checked mode: the device never panics, and every wait ends
// (a lost doorbell or CQE leaves the simulation idle, which the wait
// reports; it never spins for ever).
func FuzzFaultPlanTraffic(f *testing.F) {
	for _, s := range []string{
		`{"seed":1,"rules":[{"point":"doorbell","action":"jump","nth":2}]}`,
		`{"seed":2,"rules":[{"point":"wc.buffer","action":"tear","prob":0.5},{"point":"cq","action":"drop","nth":3}]}`,
		`{"seed":3,"rules":[{"point":"dma.read","action":"poison","prob":0.2,"match":{"target":"data"}},{"point":"eq","action":"overrun","nth":1}]}`,
		`{"seed":4,"rules":[{"point":"port","action":"down","at_ps":1000,"for_ps":3000000},{"point":"device","action":"fatal","at_ps":80000000}]}`,
		`{"seed":5,"rules":[{"point":"pcie.tlp","action":"corrupt","prob":0.3},{"point":"doorbell","action":"reorder","every":2}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := fault.Parse(data)
		if err != nil {
			return
		}
		cfg := testbed.DefaultConfig()
		cfg.Faults, cfg.Check = p, true
		cfg.Device.Faults.HealthPoll = 20 * sim.Microsecond
		w, err := testbed.New(cfg)
		if err != nil {
			return // a plan that parses but that the world refuses is bad input, answered with an error
		}
		defer w.Close()
		eps, err := w.ConnectRC(testbed.ConnOpts{Timeout: 6, RetryCnt: 2})
		if err != nil {
			return // a fatal rule may fire during bring-up: commands fail
		}
		req, rsp := eps[0], eps[1]
		for i := 0; i < 8; i++ {
			if i == 4 {
				req.QP.SetBlueFlame(false)
			}
			_, _ = req.QP.PostSend([]provider.SendWR{{WRID: uint64(i), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(uint64(i)*64, 64)}, RemoteAddr: rsp.Buf.Addr + uint64(i)*64, RKey: rsp.MR.RKey}})
			_ = req.SendCQ.ReqNotify(false)
		}
		_, _ = testbed.Wait(req.SendCQ, 8)
		w.Settle(1 << 22)
	})
}
