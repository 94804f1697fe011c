package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// perftest's refusals of the flags of perf_flags.go, and softnic's own:
// each exits 2 with one line naming the flag. (Before these flags existed
// every one of them was "flag provided but not defined", also exit 2: the
// cases check the message.)
func TestPerfFlagRefusals(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"bidir on a latency test", []string{"write_lat", "-b"}, "-b: Bidirectional is only available in BW test"},
		// 0 is the flags' "unset", but given it is refused, as perftest's
		// range check refuses it (it ran with the default).
		{"tx depth 0", []string{"write_bw", "-t", "0"}, "-t 0 out of range 1..16384"},
		{"rx depth 0", []string{"send_bw", "--rx-depth", "0"}, "-r 0 out of range 1..16384"},
		{"rx depth past perftest's MAX_RX", []string{"send_bw", "-r", "16385"}, "-r 16385 out of range 1..16384"},
		{"bidir long on send_lat", []string{"send_lat", "--bidirectional"}, "Bidirectional is only available in BW test"},
		{"events on write_lat", []string{"write_lat", "-e"}, "-e: Events feature not available on WRITE verb"},
		{"events on write_bw", []string{"write_bw", "--events"}, "Events feature not available on WRITE verb"},
		{"histogram on bw", []string{"send_bw", "-H"}, "-H: Available only on Latency tests"},
		{"unsorted on bw", []string{"read_bw", "-U"}, "-U: is Available only on Latency tests"},
		{"histogram with -D", []string{"send_lat", "-H", "-D", "1"}, "-H/-U: a timed run (-D) keeps no samples"},
		{"sl 16", []string{"send_lat", "-S", "16"}, "-S 16: Only 15 Service levels"},
		{"tos without rdma_cm", []string{"write_bw", "-T", "32"}, "-T: TOS only valid for rdma_cm based QP"},
		{"tos out of range", []string{"write_bw", "--tos", "256"}, "-T 256: TOS out of range 0..255"},
		{"tclass out of range", []string{"write_bw", "--tclass", "256"}, "--tclass 256: the traffic class is one byte"},
		{"rdma_cm", []string{"write_bw", "-R"}, "-R: rdma_cm is not available"},
		{"com_rdma_cm", []string{"write_lat", "-z"}, "-z: rdma_cm is not available"},
		{"limit_bw negative", []string{"write_bw", "-w", "-1"}, "-w: Invalid Minimum BW Limit"},
		{"limit_bw on latency", []string{"write_lat", "--limit_bw", "5"}, "-w: the BW limit is for bandwidth tests"},
		{"run_infinitely latency", []string{"write_lat", "--run_infinitely"}, "run_infinitely exists only in BW tests for now"},
		{"run_infinitely events", []string{"send_bw", "--run_infinitely", "-e"}, "run_infinitely does not support events feature yet"},
		{"run_infinitely send bidir", []string{"send_bw", "--run_infinitely", "-b"}, "not supported in SEND Bidirectional BW test"},
		{"run_infinitely one process", []string{"write_bw", "--run_infinitely", "-D", "1"}, "--run_infinitely: in one process the clock is virtual"},
		{"latency_gap on bw", []string{"write_bw", "--latency_gap", "1"}, "Latency gap feature is only for latency tests"},
		{"latency_gap negative", []string{"write_lat", "--latency_gap", "-1"}, "must be non-negative"},
		{"latency_gap past an int", []string{"write_lat", "--latency_gap", "2147483648"}, `"2147483648" does not fit in 31 bits`},
		{"latency_gap not a number", []string{"write_lat", "--latency_gap", "7us"}, `"7us" is not a 31-bit decimal number`},
		{"cpu_util", []string{"write_bw", "--cpu_util"}, "--cpu_util: softnic cannot report CPU utilisation"},
		{"mcg on write", []string{"write_bw", "-g"}, "-g: MultiCast feature only available on SEND verb"},
		{"mcg bidir", []string{"send_bw", "--mcg", "-b"}, "-g: Bidirectional mode not supported in multicast"},
		{"mcg two QPs", []string{"send_bw", "-g", "-q", "2"}, "-g: Only 1 QP supported in multicast"},
		{"mcg", []string{"send_bw", "-g", "-M", "ff0e::1"}, "-g: multicast is not available"},
		{"mcg on send_lat UD", []string{"send_lat", "-c", "UD", "--mcg"}, "-g: multicast is not available"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runPerfCmd(t, append(c.args, "--no-progress")...)
			require.Equal(t, 2, code, "stdout %s\nstderr %s", out, errOut)
			require.Contains(t, errOut, c.want)
			require.NotContains(t, errOut, "not defined")
			require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
		})
	}
}

// perfJSON runs perf with --json and decodes the document.
func perfJSON(t *testing.T, args ...string) perfResult {
	t.Helper()
	out, errOut, code := runPerfCmd(t, append(args, "--json", "--no-progress")...)
	require.Equal(t, 0, code, errOut)
	var r perfResult
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

// -b: both sides send at once; the row is the sum of the two directions
// (perftest's print_full_bw_report with the peer's report), each near a
// one-way run's (the cable is full duplex), and the title says so.
func TestPerfBidirectional(t *testing.T) {
	for _, c := range []struct {
		test string
		args []string
	}{
		{"write_bw", []string{"-n", "400"}},
		{"read_bw", []string{"-n", "400"}},
		{"send_bw", []string{"-n", "400"}},
		{"atomic_bw", []string{"-n", "400"}},
		{"send_bw UD", []string{"-n", "400", "-c", "UD", "-s", "1024"}},
		{"write_bw post_list", []string{"-n", "400", "-l", "4"}},
	} {
		t.Run(c.test, func(t *testing.T) {
			test := strings.Fields(c.test)[0]
			one := perfJSON(t, append([]string{test}, c.args...)...)
			bi := perfJSON(t, append([]string{test, "-b"}, c.args...)...)
			require.Contains(t, bi.Header.Title, "Bidirectional ")
			require.NotContains(t, one.Header.Title, "Bidirectional")
			require.Len(t, bi.Bandwidth, 1)
			row := bi.Bandwidth[0]
			require.NotNil(t, row.Local)
			require.NotNil(t, row.Remote)
			require.InDelta(t, row.Local.Avg+row.Remote.Avg, row.Avg, 1e-9)
			require.InDelta(t, row.Local.MsgRate+row.Remote.MsgRate, row.MsgRate, 1e-12)
			require.InDelta(t, row.Local.Peak+row.Remote.Peak, row.Peak, 1e-9)
			require.Equal(t, one.Bandwidth[0].Iters, row.Iters)
			for _, d := range []*bwStats{row.Local, row.Remote} {
				require.Greater(t, d.Avg, 0.5*one.Bandwidth[0].Avg, "each direction near a one-way run")
			}
			require.Greater(t, row.Avg, 1.3*one.Bandwidth[0].Avg)
			// Deterministic, as every one-process run.
			again := perfJSON(t, append([]string{test, "-b"}, c.args...)...)
			require.Equal(t, bi.Bandwidth, again.Bandwidth)
		})
	}
	t.Run("send_bw -D prints its own line", func(t *testing.T) {
		// A timed bidirectional send_bw exchanges no reports: perftest's
		// sides print their own rows.
		r := perfJSON(t, "send_bw", "-b", "-D", "1", "-s", "65536", "--timeout", "2s")
		row := r.Bandwidth[0]
		require.NotNil(t, row.Remote)
		require.Equal(t, row.Local.Avg, row.Avg)
	})
	t.Run("table", func(t *testing.T) {
		out, errOut, code := runPerfCmd(t, "write_bw", "-b", "-a", "-n", "50", "--no-progress")
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "RDMA_Write Bidirectional BW Test")
		require.Len(t, tableRows(t, out), 23)
	})
}

// nodeCounter is a counter of one node in a run's JSON counters.
func nodeCounter(r perfResult, name string) uint64 {
	var n uint64
	for owner, cs := range r.Counters {
		if strings.HasPrefix(owner, "node") {
			n += cs[name]
		}
	}
	return n
}

// -e: the loops sleep on a completion channel: the CQs are armed (once
// per event, perftest re-arms before each poll) and each wait costs the
// host an event; every iteration still completes.
func TestPerfEvents(t *testing.T) {
	for _, c := range []struct {
		test string
		args []string
	}{
		{"send_lat", []string{"-n", "200"}},
		{"read_lat", []string{"-n", "200"}},
		{"atomic_lat", []string{"-n", "200"}},
		{"send_lat UD", []string{"-n", "200", "-c", "UD"}},
		{"send_bw", []string{"-n", "400"}},
		{"read_bw", []string{"-n", "400", "-q", "3"}},
		{"atomic_bw", []string{"-n", "400"}},
		{"send_bw bidir", []string{"-n", "400", "-b"}},
	} {
		t.Run(c.test, func(t *testing.T) {
			test := strings.Fields(c.test)[0]
			poll := perfJSON(t, append([]string{test}, c.args...)...)
			ev := perfJSON(t, append([]string{test, "-e"}, c.args...)...)
			require.Zero(t, nodeCounter(poll, "cq_arms"), "polling arms no CQ")
			arms := nodeCounter(ev, "cq_arms")
			if strings.HasSuffix(test, "_lat") {
				require.GreaterOrEqual(t, arms, uint64(200), "an arm per completion waited for")
				require.Equal(t, poll.Latency[0].Iters, ev.Latency[0].Iters)
				require.Greater(t, ev.Latency[0].Avg, poll.Latency[0].Avg, "an event costs more than a poll")
			} else {
				require.Greater(t, arms, uint64(1))
				require.Equal(t, poll.Bandwidth[0].Iters, ev.Bandwidth[0].Iters)
			}
		})
	}
}

// -e in the header: perftest prints " Test with events. Using
// <device>_comp<eq_num>" under the title (ctx_print_test_info); softnic
// did not, so its header had one line fewer than stock perftest's.
func TestPerfEventsHeader(t *testing.T) {
	const line = " Test with events. Using softnic0_comp0"
	for _, c := range []struct {
		name string
		args []string
		want bool
	}{
		{"send_lat -e", []string{"send_lat", "-e", "-n", "20"}, true},
		{"send_bw --events", []string{"send_bw", "--events", "-n", "20"}, true},
		{"read_bw -e", []string{"read_bw", "-e", "-n", "20"}, true},
		{"send_lat", []string{"send_lat", "-n", "20"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runPerfCmd(t, append(c.args, "--no-progress")...)
			require.Equal(t, 0, code, errOut)
			lines := strings.Split(out, "\n")
			require.GreaterOrEqual(t, len(lines), 3, out)
			require.Equal(t, c.want, lines[2] == line, "the line under the title:\n%s", out)
			require.Equal(t, c.want, strings.Contains(out, "Test with events"), out)
			r := perfJSON(t, c.args...)
			require.Equal(t, c.want, r.Header.Events, "the JSON header's events")
		})
	}
}

// -e: after an event the bandwidth loops poll the CQ empty before they
// wait again. softnic's device (as mlx5) raises an event at once when a
// CQ is armed with CQEs already past its consumer index; rxe raises none
// for those (only a CQE written after the arm does), so a loop that waited
// for an event per 16-CQE batch stopped with CQEs in its CQ (softnic perf
// send_bw -e -d rxe0 as server: "80 of 100 received", then no progress).
// Here 40 receive CQEs land before the receiver looks; each at-once event
// is thrown away, as rxe would never raise it; every CQE must still be
// taken.
func TestPerfEventsDrainLikeRxe(t *testing.T) {
	for _, c := range []struct {
		name string
		cqes int
	}{
		{"one batch", 16},
		{"one past a batch", 17},
		{"two and a half batches", 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := testbed.New(testbed.DefaultConfig())
			require.NoError(t, err)
			defer w.Close()
			eps, err := w.ConnectRC(testbed.ConnOpts{BufSize: 1 << 16, SQDepth: 64, RQDepth: 64, Channel: true})
			require.NoError(t, err)
			ep := func(i int) *perfEP {
				e, peer := eps[i], eps[1-i]
				return &perfEP{qp: e.QP, scq: e.SendCQ, rcq: e.RecvCQ, mr: e.MR, buf: e.Buf.Bytes, recvOff: 1 << 15,
					remAddr: peer.MR.Addr + 1<<15, remKey: peer.MR.RKey, ch: e.Channel}
			}
			snd, rcv := ep(0), ep(1)
			require.NoError(t, rcv.postRecvs(64, c.cqes))
			require.NoError(t, rcv.armEvents(true))
			for i := 0; i < c.cqes; i++ {
				_, err := snd.qp.PostSend([]provider.SendWR{snd.sendWR(provider.WRSend, 64, i == c.cqes-1, 0, 0)})
				require.NoError(t, err)
			}
			w.Settle(0)
			// rxe: an arm raises no event for the CQEs already there.
			dropAtOnce := func() {
				w.Settle(0)
				for {
					ev, err := rcv.ch.GetCQEvent(0)
					if err != nil {
						return
					}
					ev.AckEvents(1)
				}
			}
			// bwServer's loop: ready, a 16-CQE poll, until not ready.
			wcs := make([]provider.WC, 16)
			got := 0
			for first := true; ; first = false {
				ok, err := rcv.ready(rcv.rcq, true)
				require.NoError(t, err)
				require.True(t, ok || !first, "the first CQE's event")
				dropAtOnce()
				if !ok {
					break
				}
				n, err := rcv.rcq.Poll(wcs)
				require.NoError(t, err)
				got += n
			}
			require.Equal(t, c.cqes, got, "receive CQEs taken")
		})
	}
}

// -H and -U: perftest's lists before the row ("#, usec", then "%d, %g"
// per sample), then the rule and the heading again.
func TestPerfHistogram(t *testing.T) {
	const iters = 40
	for _, c := range []struct {
		name      string
		args      []string
		unsorted  bool
		histogram bool
	}{
		{"write_lat -H", []string{"write_lat", "-H"}, false, true},
		{"send_lat -U", []string{"send_lat", "--report-unsorted"}, true, false},
		{"read_lat -H -U", []string{"read_lat", "-U", "--report-histogram"}, true, true},
		{"atomic_lat 4.5 spelling", []string{"atomic_lat", "--report-histogrm"}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runPerfCmd(t, append(c.args, "-n", strconv.Itoa(iters), "--no-progress")...)
			require.Equal(t, 0, code, errOut)
			lines := strings.Split(out, "\n")
			var lists [][]float64
			for i, l := range lines {
				if l != "#, usec" {
					continue
				}
				if len(lists) == 0 {
					require.Equal(t, latHeading, lines[i-1], "the first list follows the heading")
				}
				var v []float64
				for j := i + 1; j < len(lines) && strings.Contains(lines[j], ", ") && lines[j][0] != '#'; j++ {
					k, val, _ := strings.Cut(lines[j], ", ")
					require.Equal(t, strconv.Itoa(len(v)+1), k)
					f, err := strconv.ParseFloat(val, 64)
					require.NoError(t, err)
					require.Equal(t, cG(f), val)
					v = append(v, f)
				}
				lists = append(lists, v)
			}
			want := 0
			if c.unsorted {
				want++
			}
			if c.histogram {
				want++
			}
			require.Len(t, lists, want, out)
			if c.unsorted {
				require.Len(t, lists[0], iters-1)
			}
			if c.histogram {
				h := lists[len(lists)-1]
				require.Len(t, h, iters-1-latTail)
				require.True(t, slices.IsSorted(h))
				if c.unsorted {
					u := slices.Clone(lists[0])
					slices.Sort(u)
					require.Equal(t, u[:len(h)], h)
				}
			}
			require.Equal(t, 2, strings.Count(out, latHeading), "the heading, and again after the lists")
			rows := tableRows(t, out[strings.LastIndex(out, latHeading):])
			require.Len(t, rows, 1)
		})
	}
	t.Run("json", func(t *testing.T) {
		r := perfJSON(t, "send_lat", "-a", "-n", "10", "-H", "-U")
		require.Len(t, r.Samples, 23)
		require.Equal(t, 8388608, r.Samples[22].Bytes)
		require.Len(t, r.Samples[0].Unsorted, 9)
		require.Len(t, r.Samples[0].Sorted, 7)
	})
}

// --tclass is the IPv4 ToS of every RoCEv2 frame (the device builds the
// header from the QP's traffic class; UD: the AH's); -S is accepted and
// changes nothing (no VLAN is modelled).
func TestPerfTrafficClass(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		tos  byte
	}{
		{"default", []string{"write_lat"}, 0},
		{"write_lat", []string{"write_lat", "--tclass", "104"}, 104},
		{"read_bw", []string{"read_bw", "--tclass", "0xb8"}, 0xb8},
		{"send_lat UD", []string{"send_lat", "-c", "UD", "--tclass", "34"}, 34},
		{"sl accepted", []string{"write_lat", "-S", "5"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var frames, wrong int
			perfWorldHook = func(w *testbed.World) {
				w.Link.AddTap(func(_ sim.Time, f []byte) {
					if len(f) < 34 || f[12] != 0x08 || f[13] != 0x00 {
						return
					}
					frames++
					if f[15] != c.tos {
						wrong++
					}
				})
			}
			defer func() { perfWorldHook = nil }()
			out, errOut, code := runPerfCmd(t, append(c.args, "-n", "20", "--no-progress")...)
			require.Equal(t, 0, code, errOut)
			require.Greater(t, frames, 20)
			require.Zero(t, wrong, "frames with another ToS")
			if c.name == "sl accepted" {
				plain, _, _ := runPerfCmd(t, "write_lat", "-n", "20", "--no-progress")
				require.Equal(t, plain, out)
			}
		})
	}
}

// -w: perftest's verdict: exit 1 with its line when the BW average is
// below the limit, 0 when a row reaches it.
func TestPerfLimitBW(t *testing.T) {
	base := perfJSON(t, "write_bw", "-n", "200")
	avg := base.Bandwidth[0].Avg
	for _, c := range []struct {
		name  string
		limit float64
		code  int
	}{
		{"below", avg * 0.9, 0},
		{"above", avg * 1.1, 1},
		{"zero", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runPerfCmd(t, "write_bw", "-n", "200", "-w", strconv.FormatFloat(c.limit, 'f', 2, 64), "--no-progress")
			require.Equal(t, c.code, code, errOut)
			require.Len(t, tableRows(t, out), 1)
			if c.code != 0 {
				require.Contains(t, errOut, "Error: BW result is below bw limit")
			}
		})
	}
}

// --latency_gap: each post waits the gap first and is timed after it, so
// every sample is the plain one plus the gap (both sides of a ping-pong
// wait: half of two gaps).
func TestPerfLatencyGap(t *testing.T) {
	for _, test := range []string{"write_lat", "send_lat", "read_lat", "atomic_lat"} {
		t.Run(test, func(t *testing.T) {
			plain := perfJSON(t, test, "-n", "100")
			gap := perfJSON(t, test, "-n", "100", "--latency_gap", "7")
			require.InDelta(t, plain.Latency[0].Typical+7, gap.Latency[0].Typical, 0.02)
			require.InDelta(t, plain.Latency[0].Avg+7, gap.Latency[0].Avg, 0.02)
			// Decimal, 0x accepted, a leading 0 not octal (docs/cli.md).
			require.Equal(t, gap.Latency, perfJSON(t, test, "-n", "100", "--latency_gap", "07").Latency)
			require.Equal(t, gap.Latency, perfJSON(t, test, "-n", "100", "--latency_gap", "0x7").Latency)
			zero := perfJSON(t, test, "-n", "100", "--latency_gap", "0")
			require.Equal(t, plain.Latency, zero.Latency)
			// The gaps are the run's time, not a want of progress: 20
			// iterations of two 30 ms gaps outlast a 100 ms --timeout
			// budget, and the run used to end "stuck".
			long := perfJSON(t, test, "-n", "20", "--latency_gap", "30000", "--timeout", "100ms")
			require.InDelta(t, 30000, long.Latency[0].Typical, 5)
		})
	}
}
