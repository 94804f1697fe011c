package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// trace --faults shows the fault and its consequence in the walk.
func TestTraceFaultWalk(t *testing.T) {
	t.Run("torn BlueFlame: fallback fetch", func(t *testing.T) {
		plan := writePlan(t, "torn.json", `{"seed":1,"rules":[{"point":"wc.buffer","action":"tear","nth":1,"match":{"node":0}}]}`)
		var out bytes.Buffer
		require.Equal(t, 0, run([]string{"trace", "--op", "write", "--size", "100", "--inline", "--faults", plan}, &out, os.Stderr))
		s := out.String()
		require.Contains(t, s, "→ the BlueFlame WQE does not arrive whole") // the plan explained
		require.Contains(t, s, "faults and their consequences:")
		require.Contains(t, s, "FAULT WC line at BAR0 0x3800 torn: 32 of 64 bytes leave")
		require.Contains(t, s, "→ BlueFlame WQE torn: doorbell fallback")
		require.Contains(t, s, "→ WQE fetched from host memory: 192 bytes, 2 TLPs")
		require.Contains(t, s, "data verified")
	})
	t.Run("DMA error: error CQE", func(t *testing.T) {
		plan := writePlan(t, "dma.json", `{"rules":[{"point":"dma.read","action":"timeout","nth":1,"match":{"node":0,"target":"data"}}]}`)
		var out, errb bytes.Buffer
		require.Equal(t, 1, run([]string{"trace", "--size", "2048", "--faults", plan}, &out, &errb))
		require.Contains(t, errb.String(), "WR 1 completed with LOC_PROT_ERR")
		require.Contains(t, out.String(), "completion timeout")
		require.Contains(t, out.String(), "→ QP to ERR")
		require.Contains(t, out.String(), "→ error CQE: wr_id 1 LOC_PROT_ERR (status 4) vendor_err 0x51")
	})
	t.Run("CQ overrun: event", func(t *testing.T) {
		plan := writePlan(t, "cq.json", `{"rules":[{"point":"cq","action":"overrun","nth":1,"match":{"node":0}}]}`)
		var out, errb bytes.Buffer
		require.Equal(t, 1, run([]string{"trace", "--faults", plan}, &out, &errb))
		require.Contains(t, out.String(), "→ CQ overrun")
		require.Contains(t, out.String(), "→ async event on node 0: CQ_ERR")
	})
	t.Run("check: clean walk", func(t *testing.T) {
		var out bytes.Buffer
		require.Equal(t, 0, run([]string{"trace", "--check"}, &out, os.Stderr))
		require.Contains(t, out.String(), "check: no host-protocol violation observed")
	})
}
