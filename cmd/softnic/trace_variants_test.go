package main

// softnic trace on UC and UD QPs, with an SRQ at the responder, and with
// the CQs armed (--events); the operation as a word among the flags.

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func stageNames(j traceJSON) map[string]int {
	m := map[string]int{}
	for _, s := range j.Stages {
		m[s.Name]++
	}
	return m
}

func TestTraceQPTypesAndSRQ(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		qpType string
		srq    bool
		recv   int      // responder receive completions
		want   []string // stages that must be in the walk
		absent []string // stages that must not
		text   []string // in the text output
	}{
		{name: "ud_send", args: []string{"--op", "ud_send", "--size", "64"}, qpType: "UD", recv: 1,
			want: []string{"wqe_build", "packetize", "wire", "responder", "cqe_write"}, absent: []string{"ack", "ack_rx"},
			text: []string{"UD QPs (Q_Key 0x11111111)", "byte_len 104 (40-byte GRH area + 64 payload)", "GRH area: 20 zero bytes",
				"IPv4 header: version/IHL 0x45", "protocol 17, 192.0.2.1 → 192.0.2.2", "payload (64 bytes)"}},
		{name: "ud_send_imm batch", args: []string{"--op", "ud_send_imm", "--size", "1024", "--batch", "3"}, qpType: "UD", recv: 3,
			absent: []string{"ack"}},
		{name: "ud_send empty", args: []string{"--op", "ud_send", "--size", "0"}, qpType: "UD", recv: 1,
			text: []string{"byte_len 40 (40-byte GRH area + 0 payload)"}},
		{name: "uc_send", args: []string{"--op", "uc_send", "--size", "3000"}, qpType: "UC", recv: 1,
			want: []string{"packetize", "wire", "responder", "cqe_write"}, absent: []string{"ack", "ack_rx"},
			text: []string{"UC QPs (no ACKs)", "byte_len 3000"}},
		{name: "uc_send_imm", args: []string{"--op", "uc_send_imm", "--size", "100"}, qpType: "UC", recv: 1, absent: []string{"ack"}},
		{name: "uc_write", args: []string{"--op", "uc_write", "--size", "5000"}, qpType: "UC", recv: 0,
			want: []string{"packetize", "wire", "responder", "cqe_write"}, absent: []string{"ack", "ack_rx"}},
		{name: "uc_write_imm", args: []string{"--op", "uc_write_imm", "--size", "64"}, qpType: "UC", recv: 1, absent: []string{"ack"}},
		{name: "send --srq", args: []string{"--op", "send", "--srq", "--size", "2000"}, qpType: "RC", srq: true, recv: 1,
			want: []string{"ack", "cqe_write"}, text: []string{"responder receives from SRQ 0x"}},
		{name: "ud_send --srq", args: []string{"--op", "ud_send", "--srq"}, qpType: "UD", srq: true, recv: 1,
			text: []string{"responder receives from SRQ 0x", "GRH area: 20 zero bytes"}},
		{name: "uc_send --srq batch", args: []string{"--op", "uc_send", "--srq", "--batch", "4", "--no-bf"}, qpType: "UC", srq: true, recv: 4},
		{name: "write_imm --srq", args: []string{"--op", "write_imm", "--srq"}, qpType: "RC", srq: true, recv: 1},
		{name: "operation word and flags after it", args: []string{"ud_send", "--size", "100", "--srq"}, qpType: "UD", srq: true, recv: 1},
		{name: "flags, then the operation word", args: []string{"--size", "100", "uc_write", "--mtu", "512"}, qpType: "UC"},
		{name: "--op and the same word", args: []string{"--op", "uc_send", "uc_send"}, qpType: "UC", recv: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := runTraceJSON(t, tc.args...) // data_ok: payload, GRH area and receive completions verified
			require.Equal(t, tc.qpType, j.QPType)
			require.Equal(t, tc.srq, j.SRQ)
			require.Empty(t, j.Problems)
			require.Len(t, j.Recv, tc.recv)
			names := stageNames(j)
			for _, s := range tc.want {
				require.NotZero(t, names[s], "stage %s missing: %v", s, names)
			}
			for _, s := range tc.absent {
				require.Zero(t, names[s], "stage %s on a %s walk: %v", s, tc.qpType, names)
			}
			for _, r := range j.Recv {
				require.Equal(t, "SUCCESS", r.Status)
				if tc.qpType == "UD" {
					require.Equal(t, uint32(j.Size+40), r.ByteLen, "byte_len counts the GRH area")
					require.True(t, r.GRH)
					require.Equal(t, j.WQEs[0].QPN, r.SrcQP, "src_qp is the requester's QPN")
					require.Equal(t, "IPV4", r.NetworkHdr)
				}
			}
			if tc.qpType == "UD" {
				grh, err := hex.DecodeString(j.GRHHex)
				require.NoError(t, err)
				require.Len(t, grh, 40)
				require.Equal(t, make([]byte, 20), grh[:20])
				require.Equal(t, byte(0x45), grh[20])
				require.Equal(t, byte(17), grh[29])
				require.Equal(t, []byte{192, 0, 2, 1, 192, 0, 2, 2}, grh[32:40])
				for _, w := range j.WQEs {
					require.Equal(t, uint32(0x11111111), w.QKey)
					require.NotZero(t, w.DestQPN)
					if j.Size > 0 {
						require.NotZero(t, w.LKey, "the data segment after the datagram segment")
						require.Equal(t, uint32(j.Size), w.Length)
					}
				}
			} else {
				require.Empty(t, j.GRHHex)
			}

			var out, errb bytes.Buffer
			require.Equal(t, 0, run(append([]string{"trace"}, tc.args...), &out, &errb), errb.String())
			text := out.String()
			require.Contains(t, text, "data verified")
			require.NotContains(t, text, "PROBLEM")
			for _, s := range tc.text {
				require.Contains(t, text, s)
			}
		})
	}
	// --hexdump shows the datagram segment of a UD WQE.
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"trace", "--op", "ud_send", "--hexdump"}, &out, &errb), errb.String())
	require.Contains(t, out.String(), "  dgram  ")
	require.Contains(t, out.String(), "qkey 0x11111111")
	require.Contains(t, out.String(), "rgid ::ffff:192.0.2.2")
}

func TestTraceArgumentErrors(t *testing.T) {
	dir := t.TempDir()
	same := filepath.Join(dir, "same.x")
	link := filepath.Join(dir, "link.x")
	require.NoError(t, os.WriteFile(same, nil, 0o644))
	require.NoError(t, os.Symlink(same, link))
	for _, tc := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"word and --op disagree", []string{"--op", "write", "ud_send"}, 2, `operation "ud_send" and --op "write" disagree`},
		{"not an operation", []string{"bogus"}, 2, `unexpected argument "bogus"`},
		{"second operation word", []string{"ud_send", "uc_send"}, 2, `unexpected argument "uc_send"`},
		{"write read names read", []string{"write", "read"}, 2, `unexpected argument "read"`},
		{"word after the operation and flags", []string{"send", "--size", "10", "extra"}, 2, `unexpected argument "extra"`},
		{"UD larger than the MTU", []string{"--op", "ud_send", "--size", "1025"}, 2, "a UD SEND is one packet"},
		{"unknown --op", []string{"--op", "rd_send"}, 2, `unknown --op "rd_send"`},
		{"pcap and html to one file", []string{"--pcap", same, "--html", same}, 2, "are the same file"},
		{"one file spelt twice", []string{"--pcap", same, "--chrome-trace", filepath.Join(dir, ".", "x", "..", "same.x")}, 2, "are the same file"},
		{"one file through a link", []string{"--html", link, "--chrome-trace", same}, 2, "are the same file"},
		{"a million packets", []string{"--size", "1073741823"}, 2, "is 1048576 packets at MTU 1024: a walk keeps every event of its packets (about 8 a packet) in memory, at most 524288 packets (512 MiB at MTU 1024)"},
		{"1 GiB", []string{"--size", "1073741824"}, 2, "at most 524288 packets"},
		{"a post list of too many packets", []string{"--size", "4194304", "--batch", "256"}, 2, "is 1048576 packets at MTU 1024"},
		{"more than 1 GiB of buffers", []string{"--size", "1073741824", "--batch", "2", "--mtu", "4096"}, 2, "is 2147483648 bytes: a walk's buffers live in each node's host memory, at most 1073741824 bytes (1 GiB) in all"},
		{"--json of more than 2^16 packets", []string{"--size", "67108865", "--json"}, 2, "--json and --html keep every event and every frame's bytes of the walk in memory, at most 65536 packets (64 MiB at MTU 1024)"},
		{"--html of more than 2^16 packets", []string{"--size", "16777217", "--mtu", "256", "--html", filepath.Join(dir, "big.html")}, 2, "at most 65536 packets (16 MiB at MTU 256)"},
		{"size out of range", []string{"--size", "1073741825"}, 2, "--size 1073741825 out of range 0..1073741824"},
		{"a new file twice", []string{"--chrome-trace", filepath.Join(dir, "new.x"), "--html", filepath.Join(dir, "new.x")}, 2, "are the same file"},
		// Refused once the QP tells its max inline data: still before
		// the capture is created (it was, empty, over the user's file).
		{"inline over the QP's max", []string{"--inline", "--size", "513", "--pcap", filepath.Join(dir, "new.x")}, 2, "--inline --size 513: the QP's max inline data is 512 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, tc.code, run(append([]string{"trace"}, tc.args...), &out, &errb), "%v", tc.args)
			require.Contains(t, errb.String(), tc.err, "%v", tc.args)
			require.Empty(t, out.String(), "%v: nothing on stdout", tc.args)
		})
	}
	var out, errb bytes.Buffer
	require.Equal(t, 2, run([]string{"trace", "--inline", "--size", "513", "--pcap", "-"}, &out, &errb))
	require.Empty(t, out.String(), "--pcap -: no capture header before the refusal")
	_, err := os.Stat(filepath.Join(dir, "new.x"))
	require.True(t, os.IsNotExist(err), "refused before anything is written")
	out.Reset()
	errb.Reset()
	require.Equal(t, 0, run([]string{"trace", "--pcap", os.DevNull, "--html", os.DevNull}, &out, &errb), "the null device takes both: %s", errb.String())
	pos, err := parseInterspersed(newTestFlagSet(), []string{"a", "--x", "1", "b", "--", "--x", "c"})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "--x", "c"}, pos)
}

// --events arms the CQs before the post: the walk has cq_arm → eqe_write →
// event for each, and the arm → event latency is printed.
//
// This needs the device's event queues and the provider's completion
// channels.
func TestTraceEvents(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		armed int // the requester's send CQ, and the responder's receive CQ for a receive
	}{
		{"write", []string{"--op", "write"}, 1},
		{"send", []string{"--op", "send", "--size", "3000"}, 2},
		{"ud_send --srq", []string{"--op", "ud_send", "--srq"}, 2},
		{"uc_write", []string{"--op", "uc_write"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := runTraceJSON(t, append(tc.args, "--events")...)
			names := stageNames(j)
			for _, s := range []string{"cq_arm", "eqe_write", "event"} {
				require.GreaterOrEqual(t, names[s], tc.armed, "stage %s: %v", s, names)
			}
			require.Len(t, j.Events, tc.armed)
			for i, e := range j.Events {
				require.Equal(t, i, e.Node, "node 0's send CQ, then node 1's receive CQ")
				require.LessOrEqual(t, e.ArmNS, e.EQENS)
				require.LessOrEqual(t, e.EQENS, e.EventNS)
				require.Greater(t, e.LatencyNS, 0.0)
				require.InDelta(t, e.EventNS-e.ArmNS, e.LatencyNS, 1e-6)
			}
			var out, errb bytes.Buffer
			require.Equal(t, 0, run(append([]string{"trace", "--events"}, tc.args...), &out, &errb), errb.String())
			text := out.String()
			require.Contains(t, text, "CQs armed (completion events)")
			require.Equal(t, tc.armed, strings.Count(text, "\narm → event, node "), text)
			for _, s := range []string{" cq_arm ", " eqe_write ", " event "} {
				require.Contains(t, text, s)
			}
		})
	}
}

func newTestFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("x", "", "")
	return fs
}

// The new walks are deterministic too: same flags, same JSON.
func TestTraceVariantsDeterministic(t *testing.T) {
	for _, args := range [][]string{{"--op", "ud_send", "--srq", "--events"}, {"--op", "uc_write", "--size", "5000"}, {"uc_send", "--batch", "3", "--srq"}} {
		var a, b bytes.Buffer
		require.Equal(t, 0, run(append([]string{"trace", "--json"}, args...), &a, &b), b.String())
		var c bytes.Buffer
		require.Equal(t, 0, run(append([]string{"trace", "--json"}, args...), &c, &b), b.String())
		require.Equal(t, a.String(), c.String(), "args %v", args)
	}
}

// TestTraceEventTakenAfterDispatch: the application takes a completion
// event (get_cq_event) only once the kernel's handler has handed it to the
// channel, at the end of its event stage (docs/events.md step 6 → 7). The
// event was queued, and readable, at the handler's start: get_cq_event
// came HandlerPerEQE before the event it took was done.
func TestTraceEventTakenAfterDispatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"send", []string{"--op", "send", "--events"}},
		{"write", []string{"--op", "write", "--events"}},
		{"ud_send srq", []string{"--op", "ud_send", "--events", "--srq"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := runTraceJSON(t, tc.args...)
			evEnd := map[int]float64{}
			takes := 0
			for _, s := range j.Stages {
				switch s.Name {
				case "event":
					evEnd[s.Node] = s.EndNS
				case "get_cq_event":
					end, ok := evEnd[s.Node]
					require.True(t, ok, "node %d: get_cq_event at %.3f ns before any event", s.Node, s.StartNS)
					require.GreaterOrEqual(t, s.StartNS, end, "node %d: get_cq_event at %.3f ns, its event done at %.3f ns", s.Node, s.StartNS, end)
					takes++
				}
			}
			require.NotZero(t, takes)
		})
	}
}
