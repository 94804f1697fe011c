package main

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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

// TestTraceTableColumns: the text walk's columns line up whatever the
// stages, the 15-letter doorbell_decode of a doorbell walk included.
func TestTraceTableColumns(t *testing.T) {
	for _, args := range [][]string{{"trace"}, {"trace", "--no-bf"}, {"trace", "--batch", "3"}} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(args, &out, &errb), errb.String())
		lines := strings.Split(out.String(), "\n")
		var col int
		for _, l := range lines {
			if strings.Contains(l, " stage ") {
				col = strings.Index(l, "component")
				continue
			}
			f := strings.Fields(l)
			if col == 0 || len(f) != 9 {
				continue
			}
			if _, err := strconv.Atoi(f[0]); err != nil {
				continue
			}
			after := strings.Index(l, " "+f[1]+" ") + 1 + len(f[1])
			at := after + len(l[after:]) - len(strings.TrimLeft(l[after:], " "))
			require.Equal(t, col, at, "%v: the component column of\n%s", args, l)
		}
		require.NotZero(t, col, "%v: no header", args)
	}
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
	for _, bad := range [][]string{{"--op", "atomic"}, {"--mtu", "1000"}, {"--batch", "0"}} {
		errb.Reset()
		require.Equal(t, 2, run(append([]string{"trace"}, bad...), &out, &errb), "%v: a bad flag value exits 2", bad)
		require.True(t, strings.HasPrefix(errb.String(), "softnic trace:"))
	}
	// Sizes are decimal (0x for hex, a leading 0 is not octal) and never
	// negative: a bad one is a usage error, exit 2, naming the flag.
	for _, bad := range []string{"-1", "1k", "0x"} {
		errb.Reset()
		require.Equal(t, 2, run([]string{"trace", "--size", bad}, &out, &errb), bad)
		require.Contains(t, errb.String(), "-size")
	}
	for arg, want := range map[string]string{"010": "WRITE 10 B", "0x40": "WRITE 64 B"} {
		out.Reset()
		require.Equal(t, 0, run([]string{"trace", "--size", arg}, &out, &errb), arg)
		require.Contains(t, out.String(), want, arg)
	}
}

// counterLine is one line of `trace --counters`: "<owner> <name> <value>".
var counterLineRe = regexp.MustCompile(`^(node[01]|wire) [A-Za-z0-9_.]+ [1-9][0-9]*$`)

// parseCounterLines returns the counters printed after "counters
// (non-zero):", checking their format and order.
func parseCounterLines(t *testing.T, text string) map[string]map[string]uint64 {
	t.Helper()
	_, tail, ok := strings.Cut(text, "\ncounters (non-zero):\n")
	require.True(t, ok, "no counters section in\n%s", text)
	all := map[string]map[string]uint64{}
	var prev string
	for _, l := range strings.Split(strings.TrimRight(tail, "\n"), "\n") {
		require.Regexp(t, counterLineRe, l)
		f := strings.Fields(l)
		key := f[0] + " " + f[1]
		require.Less(t, prev, key, "sorted by owner, then name")
		prev = key
		v, err := strconv.ParseUint(f[2], 10, 64)
		require.NoError(t, err)
		if all[f[0]] == nil {
			all[f[0]] = map[string]uint64{}
		}
		all[f[0]][f[1]] = v
	}
	return all
}

// --counters prints every non-zero counter of both devices and the wire,
// sorted, after the walk; --json carries the same as all_counters.
func TestTraceCounters(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// counters that must be there (a value of 0: any non-zero value)
		want map[string]map[string]uint64
	}{
		{name: "write", args: []string{"--op", "write", "--size", "3000"},
			want: map[string]map[string]uint64{"node0": {"tx_packets": 3, "blueflame_writes": 1}, "node1": {"rx_packets": 3},
				"wire": {"wire_tx_frames": 0, "wire_rx_frames": 0}}},
		{name: "read", args: []string{"--op", "read", "--size", "64"},
			want: map[string]map[string]uint64{"node0": {"tx_packets": 1}, "node1": {"tx_packets": 1}}},
		{name: "send batch", args: []string{"--op", "send", "--batch", "2", "--no-bf"},
			want: map[string]map[string]uint64{"node0": {"tx_packets": 2, "doorbells": 1}, "node1": {"rx_packets": 2}}},
	}
	check := func(t *testing.T, got, want map[string]map[string]uint64) {
		t.Helper()
		for owner, m := range want {
			for name, v := range m {
				require.Contains(t, got[owner], name, "%s counter %s", owner, name)
				if v != 0 {
					require.Equal(t, v, got[owner][name], "%s counter %s", owner, name)
				}
			}
		}
		for owner, m := range got {
			for name, v := range m {
				require.NotZero(t, v, "%s %s: only non-zero counters", owner, name)
			}
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, 0, run(append([]string{"trace", "--counters"}, tc.args...), &out, &errb), errb.String())
			require.Contains(t, out.String(), "data verified")
			text := parseCounterLines(t, out.String())
			check(t, text, tc.want)

			j := runTraceJSON(t, append([]string{"--counters"}, tc.args...)...)
			check(t, j.AllCounters, tc.want)
			require.Equal(t, text, j.AllCounters, "text and JSON show the same counters")
		})
	}
	j := runTraceJSON(t)
	require.Nil(t, j.AllCounters, "without --counters")
}

// --faults applies a plan to the simulated wire; RC retransmission still
// delivers the data (the trace completes and verifies it), and the
// counters show the fault and the recovery.
//
// This needs the device's RC retransmission (go-back-N on NAK and on the
// local ACK timer).
func TestTraceFaults(t *testing.T) {
	tests := []struct {
		name, plan string
		args       []string
		want       map[string][]string // non-zero counters by owner
	}{
		{name: "drop a WRITE MIDDLE packet (NAK sequence error)", plan: dropMiddle,
			args: []string{"--op", "write", "--size", "5000"},
			want: map[string][]string{"wire": {"wire_fault_drop"}, "node0": {"packet_seq_err", "retransmitted_pkts"},
				"node1": {"out_of_sequence"}}},
		{name: "drop the ACK (local ACK timeout)", plan: dropFirstACK,
			args: []string{"--op", "write", "--size", "64"},
			want: map[string][]string{"wire": {"wire_fault_drop"}, "node0": {"local_ack_timeout_err", "retransmitted_pkts"},
				"node1": {"duplicate_request"}}},
		{name: "drop the READ response", args: []string{"--op", "read", "--size", "64"},
			plan: `{"seed": 2, "rules": [{"point": "wire.tx", "action": "drop", "nth": 1,
				"match": {"node": 1, "opcode": "RC_RDMA_READ_RESPONSE_ONLY"}}]}`,
			want: map[string][]string{"wire": {"wire_fault_drop"}, "node0": {"local_ack_timeout_err"}, "node1": {"duplicate_request"}}},
		{name: "drop a SEND", args: []string{"--op", "send", "--size", "64"},
			plan: `{"seed": 2, "rules": [{"point": "wire.rx", "action": "drop", "nth": 1, "match": {"node": 1}}]}`,
			want: map[string][]string{"wire": {"wire_fault_drop"}, "node0": {"local_ack_timeout_err"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := writePlan(t, "plan.json", tc.plan)
			var out, errb bytes.Buffer
			code := run(append([]string{"trace", "--faults", plan, "--counters"}, tc.args...), &out, &errb)
			require.Equal(t, 0, code, "the trace completes despite the lost frame\nstdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			text := out.String()
			require.Contains(t, text, "fault plan "+plan+":\n  seed ")
			require.Contains(t, text, "data verified")
			got := parseCounterLines(t, text)
			for owner, names := range tc.want {
				for _, n := range names {
					require.NotZero(t, got[owner][n], "%s %s", owner, n)
				}
			}
			require.Equal(t, uint64(1), got["wire"]["wire_fault_drop"], "exactly one frame lost")

			j := runTraceJSON(t, append([]string{"--faults", plan, "--counters"}, tc.args...)...)
			require.Contains(t, j.Faults, "rule 0: ")
			require.Equal(t, uint64(1), j.AllCounters["wire"]["wire_fault_drop"])
		})
	}
	// The same plan gives the same walk, bit for bit.
	plan := writePlan(t, "plan.json", dropMiddle)
	var a, b bytes.Buffer
	require.Equal(t, 0, run([]string{"trace", "--json", "--counters", "--faults", plan, "--size", "5000"}, &a, os.Stderr))
	require.Equal(t, 0, run([]string{"trace", "--json", "--counters", "--faults", plan, "--size", "5000"}, &b, os.Stderr))
	require.Equal(t, a.String(), b.String())

	// A link that stays down outlasts the retries: the trace fails with
	// the requester's RETRY_EXC_ERR, and --counters still shows why.
	down := writePlan(t, "down.json", `{"seed": 1, "rules": [{"point": "wire.tx", "action": "drop", "match": {"node": 0}}]}`)
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{"trace", "--faults", down, "--counters"}, &out, &errb))
	require.Contains(t, errb.String(), "softnic trace: WR 1 completed with RETRY_EXC_ERR")
	got := parseCounterLines(t, "\n"+out.String())
	require.Equal(t, uint64(8), got["wire"]["wire_fault_drop"], "the first try and 7 retries (retry_cnt 7), all lost")
	require.NotZero(t, got["node0"]["req_transport_retries_exceeded"])

	// A bad plan is refused before anything runs.
	out.Reset()
	errb.Reset()
	bad := writePlan(t, "bad.json", `{"rules": [{"point": "wire.tx", "action": "explode"}]}`)
	require.Equal(t, 1, run([]string{"trace", "--faults", bad}, &out, &errb))
	require.Contains(t, errb.String(), "softnic trace: --faults: fault:")
	require.Empty(t, out.String())
}

// chromeStage is one slice of a Chrome trace.
type chromeStage struct {
	Name string
	Pid  int
	TS   float64
}

// chromeTrace runs the trace with --chrome-trace and returns, per flow id
// in the args (flow and flows), the slices in time order, after checking
// that the flow arrows chain every stage of a flow: one arrow between two
// consecutive stages of a flow, one only where they follow each other in
// several flows (the shared stages of a post list).
func chromeTrace(t *testing.T, args ...string) map[uint64][]chromeStage {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.json")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(append([]string{"trace", "--chrome-trace", path}, args...), &out, &errb), errb.String())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc struct {
		TraceEvents []struct {
			Name string  `json:"name"`
			Ph   string  `json:"ph"`
			Pid  int     `json:"pid"`
			TS   float64 `json:"ts"`
			Args struct {
				Flow  uint64   `json:"flow"`
				Flows []uint64 `json:"flows"`
			} `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	flows := map[uint64][]chromeStage{}
	at := map[uint64][]int{} // flow -> slice numbers
	arrows := 0
	minTS := 1e18
	for k, e := range doc.TraceEvents {
		if e.Ph == "X" {
			minTS = min(minTS, e.TS)
			for _, f := range append([]uint64{e.Args.Flow}, e.Args.Flows...) {
				if f != 0 {
					flows[f] = append(flows[f], chromeStage{e.Name, e.Pid, e.TS})
					at[f] = append(at[f], k)
				}
			}
		}
		if e.Ph == "s" {
			arrows++
		}
	}
	require.Equal(t, 0.0, minTS, "time zero is the post")
	pairs := map[[2]int]bool{}
	for _, ks := range at {
		for j := 1; j < len(ks); j++ {
			pairs[[2]int{ks[j-1], ks[j]}] = true
		}
	}
	require.Equal(t, len(pairs), arrows, "one arrow between consecutive stages of each flow")
	return flows
}

// chromeFlows is chromeTrace with the stage names only.
func chromeFlows(t *testing.T, args ...string) map[uint64][]string {
	t.Helper()
	names := map[uint64][]string{}
	for f, st := range chromeTrace(t, args...) {
		for _, s := range st {
			names[f] = append(names[f], s.Name)
		}
	}
	return names
}

// TestTraceChromeFlows: every WQE's flow runs from wqe_build through the
// wire, the peer, the ACK and the CQE to the poll; the stages a post list
// shares belong to each of its WQEs.
func TestTraceChromeFlows(t *testing.T) {
	loss := writePlan(t, "drop-middle.json", dropMiddle)
	lostACK := writePlan(t, "drop-ack.json", dropFirstACK)
	for _, tc := range []struct {
		args   []string
		wqes   int
		stage  []string // stages each flow must contain, in this order
		shared []string // stages each of the flows must contain (a post list's)
	}{
		{nil, 1, []string{"wqe_build", "bf_mmio", "bf_decode", "wqe_parse", "payload_dma", "packetize", "wire", "responder", "ack", "wire", "ack_rx", "cqe_build", "cqe_write", "poll"}, nil},
		{[]string{"--no-bf"}, 1, []string{"wqe_build", "doorbell_mmio", "doorbell_decode", "wqe_fetch", "wqe_parse", "payload_dma", "packetize", "wire", "responder", "ack", "wire", "ack_rx", "cqe_write", "poll"}, nil},
		{[]string{"--batch", "4"}, 4, []string{"wqe_build", "dbr_update", "doorbell_mmio", "wc_flush", "pcie_tlp", "doorbell_decode", "wqe_fetch", "wqe_parse", "payload_dma", "packetize", "wire", "responder", "ack", "wire", "ack_rx", "cqe_write", "poll"},
			[]string{"dbr_update", "doorbell_mmio", "wc_flush", "pcie_tlp", "doorbell_decode", "wqe_fetch"}},
		{[]string{"--op", "read", "--size", "3000"}, 1, []string{"wqe_build", "wqe_parse", "packetize", "wire", "responder", "payload_dma", "packetize", "tx_pipeline", "packetize", "packetize", "wire", "wire", "rx_pipeline", "wire", "read_scatter", "read_scatter", "read_scatter", "cqe_write", "poll"}, nil},
		{[]string{"--op", "send", "--size", "3000"}, 1, []string{"wqe_build", "wqe_parse", "packetize", "wire", "responder", "rq_wqe_hit", "responder", "responder", "cqe_write", "ack", "wire", "ack_rx", "cqe_write", "poll", "poll"}, nil},
		// A lost WRITE MIDDLE packet: the NAK, the retransmitted packets
		// and their wire and responder stages join the WQE's flow.
		{[]string{"--faults", loss, "--size", "5000"}, 1, []string{"wqe_build", "packetize", "wire", "wire", "responder", "ack", "wire", "ack_rx",
			"packetize", "wire", "responder", "ack", "wire", "ack_rx", "cqe_write", "poll"}, nil},
		// A lost ACK: the packet sent again after the timeout is the same
		// PSN, in the same flow, and so is the ACK of the duplicate.
		{[]string{"--faults", lostACK}, 1, []string{"wqe_build", "packetize", "wire", "responder", "ack", "wire", "packetize", "wire", "ack", "wire", "ack_rx", "cqe_write", "poll"}, nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			flows := chromeFlows(t, tc.args...)
			reach, builds := 0, 0
			for f, st := range flows {
				if !slices.Contains(st, "wqe_build") {
					continue
				}
				builds++
				require.Equal(t, "poll", st[len(st)-1], "flow %#x ends at its poll: %v", f, st)
				j := 0
				for _, s := range st {
					if j < len(tc.stage) && s == tc.stage[j] {
						j++
					}
				}
				if j == len(tc.stage) {
					reach++
				} else {
					t.Logf("flow %#x: %v (missing %s)", f, st, tc.stage[j])
				}
				for _, s := range tc.shared {
					require.Contains(t, st, s, "flow %#x: the post list's %s", f, s)
				}
			}
			require.Equal(t, tc.wqes, builds, "a flow per WQE")
			require.Equal(t, tc.wqes, reach, "WQE flows from wqe_build to poll")
		})
	}
}

// TestTraceFlowsByPSN: in the walk JSON every stage of a packet carries its
// PSN and a flow, with loss too; a packet sent again keeps its PSN and its
// flow.
func TestTraceFlowsByPSN(t *testing.T) {
	loss := writePlan(t, "drop-middle.json", dropMiddle)
	for _, args := range [][]string{nil, {"--batch", "4"}, {"--op", "read", "--size", "3000"}, {"--op", "send", "--size", "3000"}, {"--faults", loss, "--size", "5000"}} {
		j := runTraceJSON(t, args...)
		type key struct {
			name string
			node int
			psn  uint32
		}
		flowOf := map[key]uint64{}
		sent := 0
		for _, s := range j.Stages {
			switch s.Name {
			case "packetize", "wire", "responder", "ack", "ack_rx":
				require.NotNil(t, s.PSN, "%v: %s @%.3f has no PSN", args, s.Name, s.StartNS)
				require.NotZero(t, s.Flow, "%v: %s PSN %d has no flow", args, s.Name, *s.PSN)
				k := key{s.Name, s.Node, *s.PSN}
				if f, ok := flowOf[k]; ok {
					require.Equal(t, f, s.Flow, "%v: %s PSN %d sent again in another flow", args, s.Name, *s.PSN)
					sent++
				}
				flowOf[k] = s.Flow
			case "wqe_build", "poll", "doorbell_mmio", "wqe_parse":
				require.Nil(t, s.PSN, "%v: %s", args, s.Name)
			}
		}
		if len(args) > 0 && args[0] == "--faults" {
			require.NotZero(t, sent, "the lost packet was sent again")
		}
	}
}

// update rewrites the golden files under testdata/:
//
//	go test ./cmd/softnic -run TestTraceChromeGolden -update
var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestTraceChromeGolden: the flows of `softnic trace --batch 4
// --chrome-trace`, one line per flow and stage, against
// testdata/chrome_flows_batch4.txt.
func TestTraceChromeGolden(t *testing.T) {
	flows := chromeTrace(t, "--batch", "4")
	ids := make([]uint64, 0, len(flows))
	for f := range flows {
		ids = append(ids, f)
	}
	slices.Sort(ids)
	var b strings.Builder
	b.WriteString("# softnic trace --batch 4 --chrome-trace: per flow (args flow/flows), its slices in time order: node, name, ts (us).\n")
	b.WriteString("# regenerate: go test ./cmd/softnic -run TestTraceChromeGolden -update\n")
	for _, f := range ids {
		fmt.Fprintf(&b, "flow %#x (WQE index %d)\n", f, f&0xffff)
		for _, s := range flows[f] {
			fmt.Fprintf(&b, "  nic%d %-16s %10.6f\n", s.Pid, s.Name, s.TS)
		}
	}
	path := filepath.Join("testdata", "chrome_flows_batch4.txt")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./cmd/softnic -run TestTraceChromeGolden -update")
	require.Equal(t, string(want), b.String(), "flows differ from %s; if intended, run go test ./cmd/softnic -run TestTraceChromeGolden -update", path)
}

// coverage: on the critical path every picosecond between the post and
// the CQE seen by poll belongs to a named stage (the union of the stage
// intervals of the requester's WQE covers [0, total]).
func TestTraceNoGaps(t *testing.T) {
	for _, args := range [][]string{nil, {"--no-bf"}, {"--op", "read", "--size", "3000"}, {"--op", "send"}} {
		j := runTraceJSON(t, args...)
		type iv struct{ s, e float64 }
		var ivs []iv
		for _, s := range j.Stages {
			ivs = append(ivs, iv{s.StartNS, s.EndNS})
		}
		covered := 0.0
		for covered < j.TotalNS-1e-6 {
			next := covered
			for _, v := range ivs {
				if v.s <= covered+1e-6 && v.e > next {
					next = v.e
				}
			}
			require.Greater(t, next, covered, "%v: gap at %.3f ns (no stage covers it)", args, covered)
			covered = next
		}
	}
}

// The header names the path that was taken, and why a doorbell; the
// closing line says what BlueFlame saved against the same walk by doorbell.
func TestTracePathAndClosingLine(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		header, last string
	}{
		{nil, "blueflame path,", "BlueFlame: no WQE fetch (-528.740 ns against the doorbell path, 2672.836 ns)"},
		{[]string{"--no-bf"}, "doorbell path (--no-bf),", "doorbell: WQE fetched by DMA (+528.740 ns against the BlueFlame path, 2144.096 ns)"},
		{[]string{"--op", "send", "--size", "0"}, "doorbell path (a ctrl-only WQE goes by the doorbell),", "doorbell: BlueFlame does not apply here"},
		{[]string{"--inline", "--size", "400"}, "doorbell path (WQE of 448 B larger than the 256-B BlueFlame buffer),", "doorbell: BlueFlame does not apply here"},
		{[]string{"--batch", "4"}, "doorbell path (a post list of 4 WQEs rings one doorbell),", "doorbell: BlueFlame does not apply here"},
		// An uncached UAR tears the BlueFlame copy into 8-byte stores: the
		// device drops it and fetches the WQE. The line used to claim "no
		// WQE fetch" next to a wqe_fetch stage.
		{[]string{"--profile", writePlan(t, "nc.json", `{"name":"nc","base":"cx5-gen3x16","device":{"bar":{"uar_non_cached":true}}}`)},
			"blueflame path,", "BlueFlame: the device did not use the copy and fetched the WQE by DMA, see the warnings (+0.000 ns against the doorbell path"},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(append([]string{"trace"}, tc.args...), &out, &errb), errb.String())
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		require.Contains(t, lines[0], tc.header, "%v", tc.args)
		require.Contains(t, lines[len(lines)-1], tc.last, "%v", tc.args)
	}
	j := runTraceJSON(t, "--inline", "--size", "400")
	require.Equal(t, "doorbell", j.Path)
}

func TestTraceExplainAndHexdump(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--explain"}, []string{trace.Stages["bf_decode"].Summary, trace.Stages["cqe_build"].Summary, trace.Stages["poll"].Summary}},
		{[]string{"--hexdump"}, []string{"doorbell record DBR[1] (SQ send counter, BE):\n  00000001  sq cur_post 1", "BlueFlame stores (64-byte line to the BF buffer):", "line 0"}},
		{[]string{"--hexdump", "--no-bf"}, []string{"  00000001  sq cur_post 1", "doorbell (8 bytes to UAR+0x800):\n  00000008 00010003  opcode RDMA_WRITE wqe_index 0"}},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(append([]string{"trace"}, tc.args...), &out, &errb), errb.String())
		for _, w := range tc.want {
			require.Contains(t, out.String(), w, "%v", tc.args)
		}
	}
	for name := range trace.Stages {
		require.NotEmpty(t, trace.Stages[name].Summary)
	}
}

// A walk longer than the library's bounded recorder (65536 events, about
// 8 MiB at MTU 1024) keeps all of itself: it starts at wqe_build and the
// header names the path it took.
func TestTraceLargeWalkWhole(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args          []string
		header, first string
		last          string
	}{
		{"8 MiB write", []string{"--size", "8388608"}, "blueflame path,", "wqe_build", "BlueFlame: no WQE fetch"},
		{"8 MiB read", []string{"--op", "read", "--size", "8388608"}, "blueflame path,", "wqe_build", "BlueFlame: no WQE fetch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, 0, run(append([]string{"trace"}, tc.args...), &out, &errb), errb.String())
			lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			require.Contains(t, lines[0], tc.header)
			require.Greater(t, len(lines), trace.DefaultCapacity/2, "the whole walk")
			require.Equal(t, tc.first, strings.Fields(lines[2])[1], "row 1")
			require.Contains(t, lines[len(lines)-1], tc.last)
			require.NotContains(t, out.String(), "DROPPED")
		})
	}
}

// A walk whose recorder dropped events says how many in every output and
// does not name a path it cannot know (the tests shrink the recorder).
func TestTraceDroppedEvents(t *testing.T) {
	defer func(c int) { traceRecorderCap = c }(traceRecorderCap)
	traceRecorderCap = 20
	dir := t.TempDir()
	page, chrome := filepath.Join(dir, "w.html"), filepath.Join(dir, "c.json")
	j := runTraceJSON(t)
	require.Equal(t, pathUnknown, j.Path)
	require.NotZero(t, j.DroppedEvents)
	require.LessOrEqual(t, len(j.Stages), 20, "what the recorder kept")
	require.NotEqual(t, "wqe_build", j.Stages[0].Name, "the walk's tail")
	warned := false
	for _, w := range j.Warnings {
		warned = warned || w.Name == "events_dropped" && strings.Contains(w.Detail, fmt.Sprintf("dropped the first %d events", j.DroppedEvents))
	}
	require.True(t, warned, "warnings: %+v", j.Warnings)
	dropped := fmt.Sprintf("%d events", j.DroppedEvents)
	for _, tc := range []struct {
		name    string
		args    []string
		want    []string
		notWant []string
		file    string // an output file that must say it too
	}{
		{"text", nil, []string{"unknown path (the first " + dropped + " of the walk were dropped)", "DROPPED " + dropped + ": the recorder kept the last 20", "WARN trace events_dropped"},
			[]string{"blueflame path", "doorbell path", "BlueFlame: no WQE fetch", "BlueFlame does not apply"}, ""},
		{"hexdump", []string{"--hexdump"}, []string{"doorbell or BlueFlame stores: not known"}, []string{"BlueFlame stores (", "doorbell (8 bytes"}, ""},
		{"html", []string{"--html", page}, []string{"DROPPED " + dropped}, nil, page},
		{"chrome trace", []string{"--chrome-trace", chrome}, []string{"DROPPED " + dropped}, nil, chrome},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, 0, run(append([]string{"trace"}, tc.args...), &out, &errb), errb.String())
			for _, w := range tc.want {
				require.Contains(t, out.String(), w)
			}
			for _, w := range tc.notWant {
				require.NotContains(t, out.String(), w)
			}
			if tc.file != "" {
				b, err := os.ReadFile(tc.file)
				require.NoError(t, err)
				require.Contains(t, string(b), "the first "+dropped)
			}
		})
	}
}

// TestSmallActiveMTU: under a profile whose port is slower than the
// default path MTU (1024), trace and stat run at the port's active MTU;
// an explicit --mtu above it is refused naming both numbers.
func TestSmallActiveMTU(t *testing.T) {
	prof := writePlan(t, "mtu256.json", `{"device":{"caps":{"active_mtu":256}},"wire":{"mtu":320}}`)
	out, errOut, code := runCLI(t, "trace", "--profile", prof, "--size", "1000")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "WRITE 1000 B x1, blueflame path, MTU 256")
	require.Contains(t, out, "data verified")
	out, errOut, code = runCLI(t, "stat", "--profile", prof, "-n", "3", "--size", "1000")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "sent_pkts 12") // 4 packets of 256 B a WRITE
	// Refused before anything runs, a usage error (cli.md, exit 2): it
	// was exit 1 from the QP's move to RTR, and a UD SEND over the port's
	// MTU passed the size check at --mtu and failed in the walk.
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"trace write", []string{"trace", "--mtu", "1024"}},
		{"trace ud_send over the active MTU", []string{"trace", "--op", "ud_send", "--size", "1000", "--mtu", "1024"}},
		{"stat", []string{"stat", "-n", "1", "--mtu", "512"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := runCLI(t, append(tc.args, "--profile", prof)...)
			require.Equal(t, 2, code, errOut)
			require.Contains(t, errOut, "above the port's active MTU 256")
			require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
		})
	}
}

// TestTracePcapTimesAreTheWalks: every frame of --pcap is stamped with the
// start of its wire stage, on the clock of every other output (stage times
// count from the post), holds the bytes that stage shows, and comes in time
// order (a batch queues frames on the link ahead of the ACKs the other way:
// they were written in the order they were queued, and went back in time).
func TestTracePcapTimesAreTheWalks(t *testing.T) {
	plan := filepath.Join(t.TempDir(), "drop.json")
	require.NoError(t, os.WriteFile(plan, []byte(`{"rules":[{"point":"wire.tx","action":"drop","nth":2}]}`), 0o644))
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"write 3000", []string{"--op", "write", "--size", "3000"}},
		{"read 3000", []string{"--op", "read", "--size", "3000"}},
		{"ud send", []string{"--op", "ud_send", "--size", "100"}},
		{"send with a drop and the retransmission", []string{"--op", "send", "--size", "3000", "--faults", plan}},
		{"send batch 16: ACKs between queued frames", []string{"--op", "send", "--size", "3000", "--batch", "16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.pcap")
			j := runTraceJSON(t, append(tc.args, "--pcap", path)...)
			var wire []stageJSON
			for _, s := range j.Stages {
				if s.Name == "wire" {
					wire = append(wire, s)
				}
			}
			slices.SortStableFunc(wire, func(a, b stageJSON) int { return cmp.Compare(a.StartNS, b.StartNS) })
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			r, err := trace.NewPcapReader(f)
			require.NoError(t, err)
			var last int64
			for i := 0; ; i++ {
				fr, err := r.ReadFrame()
				if err == io.EOF {
					require.Equal(t, len(wire), i, "frames in the capture")
					break
				}
				require.NoError(t, err)
				require.Less(t, i, len(wire), "more frames than wire stages")
				// PcapTimestamp truncates to the nanosecond.
				want := int64(math.Floor(wire[i].StartNS + 1e-6))
				require.Equal(t, want, fr.Timestamp.UnixNano(), "frame %d: timestamp against its wire stage at %.3f ns", i+1, wire[i].StartNS)
				require.Equal(t, wire[i].FrameHex, hex.EncodeToString(fr.Data), "frame %d bytes", i+1)
				require.GreaterOrEqual(t, fr.Timestamp.UnixNano(), last, "frame %d goes back in time", i+1)
				last = fr.Timestamp.UnixNano()
			}
		})
	}
}

// TestTraceJSONWarningsIsAList: a walk without warnings has "warnings": []
// (it was null: jq '.warnings[]' failed on every clean walk), so a
// consumer iterates it whatever the walk.
func TestTraceJSONWarningsIsAList(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"trace", "--json"}, &out, &errb), errb.String())
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(out.Bytes(), &raw))
	require.Equal(t, "[]", string(raw["warnings"]))
}
