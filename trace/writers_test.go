package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/sim"
)

const ns = sim.Time(sim.Nanosecond)

// walkEvents is a small fixed post_send walk across two nodes: it has
// nesting (wqe_fetch encloses a DMA read on another track; a DMA read
// inside another), DMA reads that overlap without nesting (they need a
// second dma track), one flow across components and nodes, a warning, a
// detail that needs JSON escaping, and a stage recorded out of time order.
func walkEvents() []Event {
	return []Event{
		{Name: "post_send", Component: "provider", Node: 0, Start: 0, End: 40 * ns, QPN: 0x12, Flow: 7, Detail: "RDMA_WRITE 4096 B"},
		{Name: "doorbell", Component: "bar", Node: 0, Start: 40 * ns, End: 41 * ns, Bytes: 8, QPN: 0x12, Flow: 7},
		{Name: "mwr", Component: "pcie", Node: 0, Start: 41 * ns, End: 41*ns + 1234, Bytes: 8, TLPs: 1, Flow: 7},
		{Name: "wqe_fetch", Component: "wqefetch", Node: 0, Start: 42 * ns, End: 700 * ns, Bytes: 64, QPN: 0x12, Flow: 7},
		{Name: "dma_read", Component: "dma", Node: 0, Start: 100 * ns, End: 600 * ns, Bytes: 2048, TLPs: 8, QPN: 0x12, Flow: 7},
		{Name: "dma_read", Component: "dma", Node: 0, Start: 200 * ns, End: 650 * ns, Bytes: 2048, TLPs: 8, QPN: 0x12},
		{Name: "cpl", Component: "dma", Node: 0, Start: 300 * ns, End: 350 * ns, Bytes: 256, TLPs: 1},
		{Name: "packetize", Component: "roce", Node: 0, Start: 650 * ns, End: 660*ns + 1, Bytes: 4174, QPN: 0x12, Flow: 7},
		{Name: "wire", Component: "wire", Node: 0, Start: 660 * ns, End: 1009*ns + 40, Bytes: 4174, QPN: 0x34, Flow: 7},
		{Name: "roce_bad_psn", Component: "roce", Node: 1, Start: 1010 * ns, End: 1010 * ns, Level: Warn, Detail: "psn 0x000005 \"expected\" 0x000004\nretry"},
		{Name: "dma_write", Component: "dma", Node: 1, Start: 1020 * ns, End: 1300 * ns, Bytes: 4096, TLPs: 16, QPN: 0x34, Flow: 7},
		{Name: "depacketize", Component: "roce", Node: 1, Start: 1009*ns + 40, End: 1020 * ns, Bytes: 4174, QPN: 0x34, Flow: 7},
	}
}

func TestAppendFixed(t *testing.T) {
	tests := []struct {
		v     int64
		scale int64
		dec   int
		want  string
	}{
		{0, 1e6, 6, "0.000000"},
		{1, 1e6, 6, "0.000001"},
		{999999, 1e6, 6, "0.999999"},
		{1000000, 1e6, 6, "1.000000"},
		{1234567890123, 1e6, 6, "1234567.890123"},
		{-1, 1e6, 6, "-0.000001"},
		{-1500000, 1e6, 6, "-1.500000"},
		{1234567, 1000, 3, "1234.567"},
		{5, 1, 0, "5"},
		{-9223372036854775808, 1e6, 6, "-9223372036854.775808"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			require.Equal(t, tc.want, string(appendFixed(nil, tc.v, tc.scale, tc.dec)))
		})
	}
}

func TestAppendJSONString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"q\"b\\", "q\"b\\"},
		{"a\nb\tc\r\x00\x1f", "a\nb\tc\r\x00\x1f"},
		{"<html>&", "<html>&"},
		{"µs → ns", "µs → ns"},
		{"bad\xffutf8", "bad\ufffdutf8"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			enc := appendJSONString(nil, tc.in)
			var back string
			require.NoError(t, json.Unmarshal(enc, &back), "%s", enc)
			require.Equal(t, tc.want, back)
		})
	}
	require.Equal(t, `"<&>"`, string(appendJSONString(nil, "<&>")), "no HTML escaping")
}

// chromeEvent is the subset of a Trace Event the tests read.
type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Pid  *int           `json:"pid"`
	Tid  *int           `json:"tid"`
	Ts   *json.Number   `json:"ts"`
	Dur  *json.Number   `json:"dur"`
	ID   int            `json:"id"`
	Bp   string         `json:"bp"`
	S    string         `json:"s"`
	Args map[string]any `json:"args"`
}

// usToPS parses a "<int>.<6 digits>" microsecond value into picoseconds,
// exactly, failing on any other form.
func usToPS(t *testing.T, n json.Number) int64 {
	t.Helper()
	s := string(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	ip, fp, ok := strings.Cut(s, ".")
	require.True(t, ok, "%s has no fraction", n)
	require.Len(t, fp, 6, "%s needs 6 decimals", n)
	i, err := strconv.ParseInt(ip, 10, 64)
	require.NoError(t, err)
	f, err := strconv.ParseInt(fp, 10, 64)
	require.NoError(t, err)
	v := i*1e6 + f
	if neg {
		v = -v
	}
	return v
}

type span struct{ start, end int64 }

// checkChrome validates a WriteChrome output for events: it parses, has an
// X per stage and an i per warning with exact times, slices on every track
// nest strictly, tracks and processes are named, and flow events pair up
// and bind to a slice of their flow.
func checkChrome(t *testing.T, data []byte, events []Event) {
	t.Helper()
	var file struct {
		TraceEvents     []chromeEvent `json:"traceEvents"`
		DisplayTimeUnit string        `json:"displayTimeUnit"`
	}
	require.NoError(t, json.Unmarshal(data, &file))
	require.Equal(t, "ns", file.DisplayTimeUnit)

	type tk struct{ pid, tid int }
	threads := map[tk]string{}
	procs := map[int]string{}
	tracks := map[tk][]span{}
	starts := map[tk]map[int64][]float64{} // track -> slice start -> flows of slices starting there
	var nX, nI int
	type flowEnd struct {
		ph string
		tk tk
		ts int64
	}
	flowEnds := map[int][]flowEnd{}
	var bytesTotal float64
	for _, ev := range file.TraceEvents {
		require.NotNil(t, ev.Pid, "%+v", ev)
		require.NotNil(t, ev.Tid, "%+v", ev)
		k := tk{*ev.Pid, *ev.Tid}
		switch ev.Ph {
		case "M":
			switch ev.Name {
			case "process_name":
				procs[k.pid] = ev.Args["name"].(string)
			case "thread_name":
				threads[k] = ev.Args["name"].(string)
			}
		case "X":
			nX++
			require.NotNil(t, ev.Ts, "%+v", ev)
			require.NotNil(t, ev.Dur, "%+v", ev)
			s, d := usToPS(t, *ev.Ts), usToPS(t, *ev.Dur)
			require.GreaterOrEqual(t, d, int64(0))
			tracks[k] = append(tracks[k], span{s, s + d})
			if starts[k] == nil {
				starts[k] = map[int64][]float64{}
			}
			f, _ := ev.Args["flow"].(float64)
			starts[k][s] = append(starts[k][s], f)
			bytesTotal += ev.Args["bytes"].(float64)
		case "i":
			nI++
			require.Equal(t, "t", ev.S)
			require.NotNil(t, ev.Ts)
			s := usToPS(t, *ev.Ts)
			tracks[k] = append(tracks[k], span{s, s})
		case "s", "f":
			require.NotNil(t, ev.Ts)
			if ev.Ph == "f" {
				require.Equal(t, "e", ev.Bp)
			}
			flowEnds[ev.ID] = append(flowEnds[ev.ID], flowEnd{ev.Ph, k, usToPS(t, *ev.Ts)})
		default:
			t.Fatalf("unexpected phase %q", ev.Ph)
		}
	}

	var wantX, wantI int
	var wantBytes float64
	arrows := 0
	flowLen := map[uint64]int{}
	for _, ev := range events {
		if ev.Level == Warn {
			wantI++
			continue
		}
		wantX++
		wantBytes += float64(ev.Bytes)
		if ev.Flow != 0 {
			flowLen[ev.Flow]++
		}
	}
	for _, n := range flowLen {
		arrows += n - 1
	}
	require.Equal(t, wantX, nX)
	require.Equal(t, wantI, nI)
	require.Equal(t, wantBytes, bytesTotal)

	// Strict nesting per track: any two spans are disjoint or nested.
	for k, sp := range tracks {
		require.Contains(t, threads, k, "track %v has no thread_name", k)
		require.Contains(t, procs, k.pid)
		for i := range sp {
			for j := i + 1; j < len(sp); j++ {
				a, b := sp[i], sp[j]
				disjoint := a.end <= b.start || b.end <= a.start
				nested := (a.start <= b.start && b.end <= a.end) || (b.start <= a.start && a.end <= b.end)
				require.True(t, disjoint || nested, "track %v (%s): %v and %v overlap without nesting", k, threads[k], a, b)
			}
		}
	}

	// Flows: each id has one s and one f, in time order, each at the start
	// of a slice of the same flow on its track.
	require.Len(t, flowEnds, arrows)
	for id, ends := range flowEnds {
		require.Len(t, ends, 2, "flow id %d", id)
		require.Equal(t, "s", ends[0].ph, "flow id %d", id)
		require.Equal(t, "f", ends[1].ph, "flow id %d", id)
		require.LessOrEqual(t, ends[0].ts, ends[1].ts)
		// Slices of some one flow must start at both ends (several slices
		// may start at the same time on a track).
		common := map[float64]int{}
		for _, e := range ends {
			fs := starts[e.tk][e.ts]
			require.NotEmpty(t, fs, "flow %d end %s binds to no slice", id, e.ph)
			seen := map[float64]bool{}
			for _, f := range fs {
				if f != 0 && !seen[f] {
					seen[f] = true
					common[f]++
				}
			}
		}
		found := false
		for _, c := range common {
			found = found || c == 2
		}
		require.True(t, found, "flow %d: its ends are not at slices of one flow", id)
	}
}

func TestWriteChromeWalk(t *testing.T) {
	events := walkEvents()
	var buf bytes.Buffer
	require.NoError(t, WriteChrome(&buf, events))
	checkChrome(t, buf.Bytes(), events)
	out := buf.String()
	require.Contains(t, out, `"args":{"name":"dma #2"}`, "overlapping DMA reads need a second track")
	require.Contains(t, out, `"args":{"name":"nic1 (host+device)"}`)
	require.Contains(t, out, `"ts":0.660000,"dur":0.349040`, "ps-exact wire stage")
	golden(t, "chrome_golden.json", buf.Bytes())

	// Byte-for-byte deterministic (maps are used inside).
	for range 20 {
		var again bytes.Buffer
		require.NoError(t, WriteChrome(&again, events))
		require.Equal(t, buf.String(), again.String())
	}
}

func TestWriteTextWalk(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteText(&buf, walkEvents()))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 1+len(walkEvents()))
	require.True(t, strings.HasPrefix(lines[11], "WARN"), lines[11])
	require.Contains(t, lines[11], `psn 0x000005 "expected" 0x000004\nretry`)
	require.Contains(t, lines[10], "depacketize ", "sorted by start, though recorded last")
	require.Contains(t, lines[10], "   1009.040 ")
	golden(t, "text_golden.txt", buf.Bytes())
}

// randomEvents makes n events with heavy overlap on few tracks, warnings,
// flows, zero-length and malformed (End < Start) stages.
func randomEvents(seed uint64, n int) []Event {
	r := rand.New(rand.NewPCG(seed, 1))
	comps := []string{"dma", "pcie", "roce", "zeta", "wire"}
	evs := make([]Event, n)
	for i := range evs {
		start := sim.Time(r.IntN(2000)) * 100
		ev := Event{
			Name:      fmt.Sprintf("ev%d", i),
			Component: comps[r.IntN(len(comps))],
			Node:      r.IntN(3),
			Start:     start,
			End:       start + sim.Time(r.IntN(5)*r.IntN(3000))*100,
			Bytes:     r.IntN(5000),
			TLPs:      r.IntN(4),
			QPN:       uint32(r.IntN(3)),
		}
		switch r.IntN(10) {
		case 0:
			ev.Level, ev.End, ev.Detail = Warn, ev.Start, "warn"
		case 1:
			ev.End = ev.Start - 1 // malformed: written as an instant slice
		}
		if r.IntN(2) == 0 {
			ev.Flow = uint64(1 + r.IntN(10))
		}
		evs[i] = ev
	}
	return evs
}

func TestWriteChromeRandom(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			events := randomEvents(seed, 300)
			var buf bytes.Buffer
			require.NoError(t, WriteChrome(&buf, events))
			checkChrome(t, buf.Bytes(), events)
		})
	}
}

func TestWritersEmpty(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteChrome(&buf, nil))
	checkChrome(t, buf.Bytes(), nil)
	buf.Reset()
	require.NoError(t, WriteText(&buf, nil))
	require.Equal(t, 1, strings.Count(buf.String(), "\n"), "header only")
}

type errWriter struct{}

var errDisk = errors.New("disk full")

func (errWriter) Write([]byte) (int, error) { return 0, errDisk }

func TestWritersPropagateErrors(t *testing.T) {
	require.ErrorIs(t, WriteChrome(errWriter{}, walkEvents()), errDisk)
	require.ErrorIs(t, WriteText(errWriter{}, walkEvents()), errDisk)
}

func TestRecorderToWriters(t *testing.T) {
	// End to end with the Recorder: stages and a warning.
	r := NewRecorder()
	r.Stage(0, "dma", "dma_read", 0, 1000, 64, 1, 3, 9)
	r.Stage(0, "dma", "dma_read", 500, 1500, 64, 1, 3, 0)
	r.Warnf(0, 700, "dma", "dma_bad_lkey", "lkey %#x", 0x55)
	var buf bytes.Buffer
	require.NoError(t, WriteChrome(&buf, r.Events()))
	checkChrome(t, buf.Bytes(), r.Events())
	require.Contains(t, buf.String(), `"detail":"lkey 0x55"`)
}

func BenchmarkWriteChrome(b *testing.B) {
	events := randomEvents(1, 10000)
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteChrome(io.Discard, events); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteText(b *testing.B) {
	events := randomEvents(1, 10000)
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteText(io.Discard, events); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLinkFlowsResponse: a response (an ACK's wire stage back to the
// requester) joins the flow of the nearest request PSN at or before its
// own, modulo 2^24, and none at half the PSN space or more; the search
// agrees with a scan of every request across the wrap.
func TestLinkFlowsResponse(t *testing.T) {
	const reqQP, rspQP = 0x100, 0x200
	wrapping := []int32{0xfffffe, 0xffffff, 0, 1, 0x10}
	high := []int32{0xfffff0, 0xfffff8}
	for _, tc := range []struct {
		name string
		reqs []int32 // request PSNs, flows 1, 2, ...
		psn  int32   // the response's
		want uint64
	}{
		{"at a request", wrapping, 0, 3},
		{"before the wrap", wrapping, 0xffffff, 2},
		{"after the last before the wrap", wrapping, 5, 4},
		{"after the last", wrapping, 0x20, 5},
		{"half the space away", wrapping, 0x10 + 0x7fffff, 0},
		{"below every request: the highest, wrapped", high, 3, 2},
		{"below every request, half the space away", high, 0x7ffffa, 0},
		{"no request", nil, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var evs []Event
			for i, p := range tc.reqs {
				f := uint64(i + 1)
				evs = append(evs,
					Event{Name: "packetize", Component: "roce", Node: 0, QPN: reqQP, PSN: p, Flow: f},
					Event{Name: "wire", Component: "wire", Node: 0, QPN: rspQP, PSN: p, Flow: f})
			}
			evs = append(evs, Event{Name: "ack", Component: "roce", Node: 1, QPN: rspQP, PSN: tc.psn},
				Event{Name: "wire", Component: "wire", Node: 1, QPN: reqQP, PSN: tc.psn})
			got := LinkFlows(evs)[len(evs)-1].Flow
			require.Equal(t, tc.want, got)
			scan, bestD := uint64(0), int32(0xffffff/2)
			for i, p := range tc.reqs {
				if d := (tc.psn - p) & 0xffffff; d < bestD {
					scan, bestD = uint64(i+1), d
				}
			}
			require.Equal(t, scan, got, "the scan of every request agrees")
		})
	}
}
