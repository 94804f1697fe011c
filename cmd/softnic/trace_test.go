package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/trace"
	"github.com/stretchr/testify/require"
)

func runTraceJSON(t *testing.T, args ...string) traceJSON {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"trace", "--json"}, args...), &out, &errb)
	require.Equal(t, 0, code, "stderr: %s", errb.String())
	var j traceJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &j))
	require.True(t, j.DataOK)
	return j
}

func sumStage(j traceJSON, name string, node int) (count, tlps, bytes int) {
	for _, s := range j.Stages {
		if s.Name == name && s.Node == node {
			count++
			tlps += s.TLPs
			bytes += s.Bytes
		}
	}
	return
}

// TestTraceDefault runs the README's first command and checks the walk.
func TestTraceDefault(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"trace"}, &out, &errb), errb.String())
	text := out.String()
	for _, stage := range []string{"wqe_build", "dbr_update", "bf_mmio", "wc_flush", "pcie_tlp", "payload_dma",
		"packetize", "wire", "responder", "ack", "cqe_write", "poll"} {
		require.Contains(t, text, " "+stage+" ", "stage %s missing from\n%s", stage, text)
	}
	require.NotContains(t, text, "wqe_fetch", "BlueFlame skips the WQE fetch")
	require.Contains(t, text, "total post → CQE:")
	require.Contains(t, text, "data verified")
}

// TestTraceBlueFlameVsDoorbell: BlueFlame has no WQE-fetch DMA and
// ceil(WQE/64) MWr TLPs; the doorbell path has one 8-byte MWr plus one DMA
// read of the WQE; BlueFlame is faster post → CQE.
func TestTraceBlueFlameVsDoorbell(t *testing.T) {
	bf := runTraceJSON(t)
	db := runTraceJSON(t, "--no-bf")
	require.Equal(t, "blueflame", bf.Path)
	require.Equal(t, "doorbell", db.Path)

	n, _, _ := sumStage(bf, "wqe_fetch", 0)
	require.Zero(t, n, "no WQE fetch on the BlueFlame path")
	wqeBytes := len(bf.WQEs[0].WQEHex) / 2
	_, tlps, _ := sumStage(bf, "pcie_tlp", 0)
	require.Equal(t, (wqeBytes+63)/64, tlps, "ceil(WQE/64) MWr TLPs for a %d-byte WQE", wqeBytes)

	n, _, b := sumStage(db, "wqe_fetch", 0)
	require.Equal(t, 1, n, "one DMA read of the WQE")
	require.Equal(t, 64, b)
	_, tlps, b = sumStage(db, "pcie_tlp", 0)
	require.Equal(t, 1, tlps, "one doorbell MWr")
	hdr := pcie.Gen3x16().HdrMWr
	require.Equal(t, 8+hdr, b, "of 8 payload bytes (pcie_tlp counts wire bytes: payload + %d B TLP overhead)", hdr)

	require.Less(t, bf.TotalNS, db.TotalNS, "BlueFlame post → CQE must beat the doorbell path")
}

// TestTraceDeterministic: same profile and workload, identical output.
func TestTraceDeterministic(t *testing.T) {
	for _, args := range [][]string{{}, {"--op", "read", "--size", "5000", "--mtu", "1024"}, {"--op", "send", "--batch", "4", "--no-bf"}} {
		var a, b bytes.Buffer
		require.Equal(t, 0, run(append([]string{"trace", "--json"}, args...), &a, os.Stderr))
		require.Equal(t, 0, run(append([]string{"trace", "--json"}, args...), &b, os.Stderr))
		require.Equal(t, a.String(), b.String(), "args %v", args)
	}
}

func TestTraceOptionsAndOutputs(t *testing.T) {
	dir := t.TempDir()
	pcapPath := filepath.Join(dir, "w.pcap")
	chrome := filepath.Join(dir, "c.json")
	for _, op := range []string{"send", "send_imm", "write", "write_imm", "read"} {
		j := runTraceJSON(t, "--op", op, "--size", "3000", "--mtu", "1024", "--pcap", pcapPath, "--chrome-trace", chrome)
		require.Len(t, j.WQEs, 1)
		w := j.WQEs[0]
		require.Equal(t, uint16(0), w.WQEIndex)
		require.NotZero(t, w.QPN)
		require.Equal(t, uint32(3000), w.Length)
		require.NotZero(t, w.LKey)
		if op != "send" && op != "send_imm" {
			require.NotZero(t, w.RAddr)
			require.NotZero(t, w.RKey)
		}
		// The pcap holds every frame with a good ICRC.
		var dec, derr bytes.Buffer
		require.Equal(t, 0, run([]string{"decode", pcapPath}, &dec, &derr), dec.String()+derr.String())
		f, err := os.Open(pcapPath)
		require.NoError(t, err)
		r, err := trace.NewPcapReader(f)
		require.NoError(t, err)
		frames := 0
		for {
			if _, err := r.ReadFrame(); err != nil {
				break
			}
			frames++
		}
		f.Close()
		require.GreaterOrEqual(t, frames, 4, "3 request packets and at least one response for %s", op)
		cj, err := os.ReadFile(chrome)
		require.NoError(t, err)
		require.True(t, json.Valid(cj))
	}
	j := runTraceJSON(t, "--inline", "--size", "100")
	require.Zero(t, j.WQEs[0].LKey, "inline WQE has no data pointer")
	j = runTraceJSON(t, "--batch", "3")
	require.Len(t, j.WQEs, 3)
	require.Equal(t, []uint16{0, 1, 2}, []uint16{j.WQEs[0].WQEIndex, j.WQEs[1].WQEIndex, j.WQEs[2].WQEIndex})

	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"trace", "--hexdump"}, &out, &errb))
	require.Contains(t, out.String(), "ctrl ")
	require.Contains(t, out.String(), "requester CQE 0")
	for _, bad := range [][]string{{"--op", "atomic"}, {"--mtu", "1000"}, {"--batch", "0"}, {"--size", "-1"}} {
		errb.Reset()
		require.Equal(t, 1, run(append([]string{"trace"}, bad...), &out, &errb), "%v", bad)
		require.True(t, strings.HasPrefix(errb.String(), "softnic trace:"))
	}
}
