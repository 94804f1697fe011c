package bar

import (
	"testing"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/stretchr/testify/require"
)

func faultRig(t *testing.T, rules ...fault.Rule) *rig {
	t.Helper()
	r := newRig(t, nil)
	p := &fault.Plan{Seed: 1, Rules: rules}
	require.NoError(t, p.Validate())
	in := fault.NewInjector(p)
	r.b.SetFaults(in)
	r.m.SetFaults(in)
	return r
}

// A two-line BlueFlame WQE under a wc.buffer rule on its first line.
func TestWCLineFaults(t *testing.T) {
	uar := uint32(DefaultFirstUAR)
	for _, tc := range []struct {
		a    fault.Action
		want string // the first call the device sees
		ctr  string
	}{
		{fault.Tear, "db", CtrBfTorn.String()},          // half the line missing: doorbell fallback at the drain time
		{fault.Drop, "", CtrBfTorn.String()},            // the ctrl line never arrives: nothing to ring
		{fault.Reorder, "db", CtrBfOutOfOrder.String()}, // line 1 first: lines not ascending
		{fault.Duplicate, "db", CtrBfTorn.String()},     // line 0 twice: a new WQE seems to start; fallback
		{fault.Delay, "db", CtrBfOutOfOrder.String()},   // line 0 held: line 1 comes first
		{fault.Corrupt, "bf", ""},
	} {
		t.Run(tc.a.String(), func(t *testing.T) {
			rule := fault.Rule{Point: fault.WCBuffer, Action: tc.a, Nth: 1, Byte: 20, Mask: 0x01}
			if tc.a == fault.Delay {
				rule.Delay = 500 * sim.Nanosecond
			}
			if tc.a != fault.Corrupt {
				rule.Byte, rule.Mask = 0, 0
			}
			r := faultRig(t, rule)
			w := wqe(0x42, 0, 8)
			r.copyBF(r.bfOff(uar, 0, 0), w)
			r.m.Flush()
			r.settle()
			require.Equal(t, uint64(1), r.ctr.Value(host.CtrFaultWCLine))
			require.Equal(t, uint64(1), r.ctr.Get(fault.CounterName(fault.WCBuffer, tc.a)))
			if tc.want == "" {
				for _, c := range r.h.calls {
					require.NotEqual(t, "bf", c.kind)
				}
			} else {
				require.NotEmpty(t, r.h.calls)
				require.Equal(t, tc.want, r.h.calls[0].kind)
			}
			if tc.ctr != "" {
				require.NotZero(t, r.ctr.Get(tc.ctr))
			}
			if tc.a == fault.Corrupt {
				got := r.h.calls[0].data
				require.Equal(t, w[20]^0x01, got[20], "the chosen bit flipped")
			}
		})
	}
}

func TestMMIOTLPFaults(t *testing.T) {
	uar := uint32(DefaultFirstUAR)
	db := wqe(0x42, 3, 1)[:8]
	ring := func(r *rig) {
		r.m.Store64(r.bfOff(uar, 0, 0), leU64(db))
		r.m.Flush()
		r.settle()
	}
	r := faultRig(t, fault.Rule{Point: fault.PCIeTLP, Action: fault.Drop, Nth: 1, Match: fault.Match{TLP: "MWr"}})
	ring(r)
	require.Empty(t, r.h.calls, "the doorbell's TLP was lost")
	ring(r)
	require.Len(t, r.h.calls, 1)

	r = faultRig(t, fault.Rule{Point: fault.PCIeTLP, Action: fault.Duplicate, Nth: 1})
	ring(r)
	require.Len(t, r.h.calls, 2)

	r = faultRig(t, fault.Rule{Point: fault.PCIeTLP, Action: fault.UR, Nth: 1, Match: fault.Match{TLP: "MRd"}})
	require.Equal(t, uint32(0xffffffff), r.m.Load32(mlx5.InitSegFWRev))
	require.NotEqual(t, uint32(0xffffffff), r.m.Load32(mlx5.InitSegFWRev))
}

// Every pcie.tlp action that fires on either TLP type does what
// docs/faults.md says, and is counted and traced: UR on an MWr used to fire
// (Injector.Fired counted it) with no effect, no counter and no warning;
// delay and duplicate on an MRd likewise.
func TestMMIOTLPFaultsEveryKind(t *testing.T) {
	uar := uint32(DefaultFirstUAR)
	db := wqe(0x42, 3, 1)[:8]
	ring := func(r *rig) {
		r.m.Store64(r.bfOff(uar, 0, 0), leU64(db))
		r.m.Flush()
		r.settle()
	}
	load := func(r *rig) (uint32, sim.Duration) {
		t0 := r.eng.Now()
		v := r.m.Load32(mlx5.InitSegFWRev)
		return v, r.eng.Now().Sub(t0)
	}
	plain := newRig(t, nil)
	want, base := load(plain)
	tests := []struct {
		name  string
		rule  fault.Rule
		check func(t *testing.T, r *rig)
	}{
		{"ur on MWr loses the write", fault.Rule{Point: fault.PCIeTLP, Action: fault.UR, Nth: 1, Match: fault.Match{TLP: "MWr"}}, func(t *testing.T, r *rig) {
			ring(r)
			require.Empty(t, r.h.calls, "a posted write answered UR is discarded")
			ring(r)
			require.Len(t, r.h.calls, 1)
		}},
		{"delay on MRd delays the completion", fault.Rule{Point: fault.PCIeTLP, Action: fault.Delay, Delay: 5 * sim.Microsecond, Nth: 1, Match: fault.Match{TLP: "MRd"}}, func(t *testing.T, r *rig) {
			v, took := load(r)
			require.Equal(t, want, v)
			require.GreaterOrEqual(t, took, base+5*sim.Microsecond)
		}},
		{"duplicate on MRd reads the same value", fault.Rule{Point: fault.PCIeTLP, Action: fault.Duplicate, Nth: 1, Match: fault.Match{TLP: "MRd"}}, func(t *testing.T, r *rig) {
			v, _ := load(r)
			require.Equal(t, want, v)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := faultRig(t, tc.rule)
			tc.check(t, r)
			require.Equal(t, uint64(1), r.ctr.Value(CtrFaultMMIOTLP))
			require.Equal(t, uint64(1), r.ctr.Get(fault.CounterName(fault.PCIeTLP, tc.rule.Action)))
			warned := 0
			for _, e := range r.rec.Events() {
				if e.Component == "fault" && e.Name == CtrFaultMMIOTLP.String() {
					warned++
				}
			}
			require.Equal(t, 1, warned, "one trace warning")
		})
	}
}

func TestFatalHealthAndLinkLoss(t *testing.T) {
	r := newRig(t, nil)
	r.eng.Advance(3 * sim.Millisecond)
	hc := r.be32(mlx5.InitSegHealthCount)
	require.NotZero(t, hc)
	require.Zero(t, r.be32(mlx5.InitSegHealth+0x3c))
	r.b.SetFatal(r.eng.Now(), 0x7)
	r.eng.Advance(5 * sim.Millisecond)
	require.Equal(t, hc, r.be32(mlx5.InitSegHealthCount), "heartbeat frozen")
	require.Equal(t, uint32(1)<<31, r.be32(mlx5.InitSegHealth+0x38), "RFR")
	require.Equal(t, uint32(0x7)<<16, r.be32(mlx5.InitSegHealth+0x3c), "synd byte at 0x23d")
	synd, dead := r.b.Fatal()
	require.True(t, dead)
	require.Equal(t, uint8(7), synd)

	r.b.SetLinkLost()
	require.Equal(t, uint32(0xffffffff), r.m.Load32(mlx5.InitSegHealth+0x30), "fw_ver reads all ones")
	r.m.Store64(r.bfOff(DefaultFirstUAR, 0, 0), 1)
	r.m.Flush()
	r.settle()
	require.Empty(t, r.h.calls)
	require.NotZero(t, r.ctr.Value(CtrLinkLostWrite))
	require.NotZero(t, r.ctr.Value(CtrLinkLostRead))
}

func leU64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}
