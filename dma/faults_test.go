package dma

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
	"github.com/stretchr/testify/require"
)

func withFaults(t *testing.T, r *rig, rules ...fault.Rule) {
	t.Helper()
	p := &fault.Plan{Seed: 1, Rules: rules}
	require.NoError(t, p.Validate())
	r.dma.SetFaults(fault.NewInjector(p))
}

func TestPCIeErrors(t *testing.T) {
	for _, a := range []fault.Action{fault.Timeout, fault.Abort, fault.UR, fault.Poison, fault.IOMMU} {
		t.Run(a.String(), func(t *testing.T) {
			r := newRig(t, Config{})
			withFaults(t, r, fault.Rule{Point: fault.DMARead, Action: a, Nth: 1, Match: fault.Match{Target: "dbr"}},
				fault.Rule{Point: fault.DMAWrite, Action: a, Nth: 1, Match: fault.Match{Target: "data"}})
			require.NoError(t, r.mem.Write(memBase, []byte{1, 2, 3, 4}))
			buf := make([]byte, 4)
			// A data read does not match a dbr rule.
			_, _, err := r.dma.Read(0, memBase, buf)
			require.NoError(t, err)
			r.dma.SetTarget(fault.KindDBR)
			done, _, err := r.dma.Read(0, memBase, buf)
			var pe *PCIeError
			require.True(t, errors.As(err, &pe))
			require.ErrorIs(t, err, ErrPCIe)
			require.Equal(t, a, pe.Kind)
			require.Equal(t, fault.KindDBR, pe.Target)
			require.Equal(t, []byte{0, 0, 0, 0}, buf, "no data from a failed read")
			require.Equal(t, mlx5.SyndLocalProt, Syndrome(err))
			if a == fault.Timeout {
				require.Equal(t, sim.Time(CompletionTimeout), done)
			}
			// The target resets after one access.
			_, _, err = r.dma.Read(0, memBase, buf)
			require.NoError(t, err)
			// A failed write lands nothing.
			_, _, err = r.dma.Write(0, memBase+64, []byte{9})
			require.ErrorIs(t, err, ErrPCIe)
			got := make([]byte, 1)
			require.NoError(t, r.mem.Read(memBase+64, got))
			require.Zero(t, got[0])
			require.Equal(t, uint64(1), r.ctr.Value(CtrDmaFaultRead))
			require.Equal(t, uint64(1), r.ctr.Value(CtrDmaFaultWrite))
			require.Equal(t, uint64(2), r.ctr.Get(fault.CounterName(fault.DMARead, a))+r.ctr.Get(fault.CounterName(fault.DMAWrite, a)))
		})
	}
}

func TestDMADelayCorruptDead(t *testing.T) {
	r := newRig(t, Config{})
	buf := make([]byte, 64)
	base, _, err := r.dma.Read(0, memBase, buf)
	require.NoError(t, err)
	r = newRig(t, Config{})
	withFaults(t, r, fault.Rule{Point: fault.DMARead, Action: fault.Delay, Nth: 1, Delay: 7 * sim.Microsecond},
		fault.Rule{Point: fault.DMAWrite, Action: fault.Corrupt, Nth: 1, Byte: 1, Mask: 0x80})
	done, _, err := r.dma.Read(0, memBase, buf)
	require.NoError(t, err)
	require.Equal(t, base.Add(7*sim.Microsecond), done)
	src := []byte{1, 2, 3}
	_, _, err = r.dma.Write(0, memBase+128, src)
	require.NoError(t, err)
	require.Equal(t, []byte{1, 2, 3}, src, "the caller's buffer is untouched")
	got := make([]byte, 3)
	require.NoError(t, r.mem.Read(memBase+128, got))
	require.Equal(t, []byte{1, 0x82, 3}, got)
	r.dma.Dead()
	_, _, err = r.dma.Read(0, memBase, buf)
	require.ErrorIs(t, err, ErrPCIe)
	_, _, err = r.dma.WriteVisible(0, memBase, buf)
	require.ErrorIs(t, err, ErrPCIe)
}

// The fault hooks cost nothing when no plan is set: no allocation.
func TestNoFaultsNoAllocs(t *testing.T) {
	r := newRig(t, Config{})
	buf := make([]byte, 64)
	require.Zero(t, testing.AllocsPerRun(100, func() {
		r.dma.SetTarget(fault.KindCQE)
		_, _, _ = r.dma.Read(0, memBase, buf)
		r.dma.SetTarget(fault.KindDBR)
		_, _, _ = r.dma.Write(0, memBase, buf)
	}))
}

// A labelled access clears its label, so that the accesses after it (with
// no plan set) take the path that skips the fault hooks: target 0.
func TestTargetClearedAfterOneAccess(t *testing.T) {
	r := newRig(t, Config{})
	buf := make([]byte, 8)
	for _, access := range []func(){
		func() { _, _, _ = r.dma.Read(0, memBase, buf) },
		func() { _, _, _ = r.dma.Write(0, memBase, buf) },
		func() { _, _, _ = r.dma.WriteVisible(0, memBase, buf) },
		func() { _, _, _ = r.dma.TimeWrite(0, memBase, len(buf)) },
	} {
		r.dma.SetTargetFor(fault.KindWQE, 7, 3)
		access()
		require.Equal(t, fault.KindNone, r.dma.target)
		require.Zero(t, r.dma.tqpn)
		require.Zero(t, r.dma.twqe)
	}
}
