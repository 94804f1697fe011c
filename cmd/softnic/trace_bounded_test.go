package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"
)

// walkFrames is what these tests read of trace --json: the stages with
// their frame bytes, the warnings and the data check.
type walkFrames struct {
	Stages []struct {
		Name     string `json:"name"`
		FrameHex string `json:"frame_hex"`
	} `json:"stages"`
	Warnings []struct {
		Name   string `json:"name"`
		Detail string `json:"detail"`
	} `json:"warnings"`
	DataOK bool `json:"data_ok"`
}

// TestTraceLossyWalkBounded: a fault plan that makes a walk resend (30%
// of frames held behind the next: out-of-sequence NAKs, go-back-N) is no
// longer bounded by its packets. The recorder keeps the walk's last
// walkEventCap events and says how many it dropped; --json keeps the bytes
// of the last walkFrameCap frames, the tail's stages still carry theirs,
// and a warning says how many frames went. The same walk without the plan
// loses nothing.
func TestTraceLossyWalkBounded(t *testing.T) {
	plan := filepath.Join(t.TempDir(), "reorder.json")
	require.NoError(t, os.WriteFile(plan, []byte(`{"seed": 6, "rules": [{"point": "wire.tx", "action": "reorder", "prob": 0.3}]}`), 0o644))
	runTrace := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(append([]string{"trace"}, args...), &out, &errb)
		require.Equal(t, 0, code, "stderr: %s", errb.String())
		return out.String()
	}

	t.Run("text", func(t *testing.T) {
		const size = 2 << 20 // 2048 packets at MTU 1024
		out := runTrace("--size", fmt.Sprint(size), "--faults", plan)
		require.Contains(t, out, fmt.Sprintf("(data verified, %d bytes)", size))
		require.Contains(t, out, fmt.Sprintf("the recorder kept the last %d,", walkEventCap(2048)))
		require.Contains(t, out, "WARN trace events_dropped")
		clean := runTrace("--size", fmt.Sprint(size))
		require.NotContains(t, clean, "DROPPED")
	})

	t.Run("json", func(t *testing.T) {
		const size = 1 << 20 // 1024 packets
		var j walkFrames
		require.NoError(t, json.Unmarshal([]byte(runTrace("--size", fmt.Sprint(size), "--faults", plan, "--json")), &j))
		require.True(t, j.DataOK)
		var warned bool
		for _, w := range j.Warnings {
			if w.Name == "frames_dropped" {
				warned = true
				require.Contains(t, w.Detail, fmt.Sprintf("more than it keeps the bytes of (%d)", walkFrameCap(1024)))
			}
		}
		require.True(t, warned, "a frames_dropped warning")
		withBytes, lastWire := 0, ""
		for _, s := range j.Stages {
			if s.FrameHex != "" {
				withBytes++
			}
			if s.Name == "wire" {
				lastWire = s.FrameHex
			}
		}
		// Each kept frame is shown by at most its packetize/ack and its wire stage.
		require.LessOrEqual(t, withBytes, 2*walkFrameCap(1024))
		require.NotEmpty(t, lastWire, "the walk's tail keeps its frames")

		var clean struct {
			Warnings []struct {
				Component string `json:"component"`
			} `json:"warnings"`
		}
		require.NoError(t, json.Unmarshal([]byte(runTrace("--size", fmt.Sprint(size), "--json")), &clean))
		for _, w := range clean.Warnings {
			require.NotEqual(t, "trace", w.Component, "a clean walk drops nothing")
		}
	})
}

// TestFrameLog: the ring keeps the last max frames, and a stage name takes
// the frames of a (source, PSN) in the order they were sent, each once: the
// Nth stage the Nth copy, nothing where that copy was overwritten (not a
// later copy's bytes).
func TestFrameLog(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	l := newFrameLog(3)
	for i, f := range []capturedFrame{
		{a, 1, []byte("a1")}, {b, 1, []byte("b1")}, {a, 1, []byte("a1 again")}, {a, 2, []byte("a2")}, {a, 1, []byte("a1 third")},
	} {
		l.add(f)
		require.Equal(t, min(i+1, 3), len(l.frames))
	}
	require.Equal(t, 2, l.dropped)
	for i, tc := range []struct {
		name string
		ip   netip.Addr
		psn  uint32
		want string // "" for none
	}{
		{"wire", a, 1, ""}, // the first copy was overwritten
		{"wire", a, 1, "a1 again"},
		{"wire", a, 1, "a1 third"},
		{"wire", a, 1, ""},      // each copy once a name
		{"packetize", a, 1, ""}, // another name starts over
		{"packetize", a, 1, "a1 again"},
		{"wire", a, 2, "a2"},
		{"wire", b, 1, ""}, // overwritten
		{"ack", a, 2, "a2"},
		{"wire", b, 7, ""}, // never seen
	} {
		got := l.frameFor(tc.name, tc.ip, tc.psn)
		if tc.want == "" {
			require.Nil(t, got, "lookup %d %s %v %d", i, tc.name, tc.ip, tc.psn)
		} else {
			require.Equal(t, tc.want, string(got), "lookup %d %s %v %d", i, tc.name, tc.ip, tc.psn)
		}
	}
}

// TestTraceLossyWalkFrameBytes: in a walk that resends more frames than
// --json keeps the bytes of, each wire stage's frame_hex is the frame the
// --pcap capture has at that stage (the same PSN is resent with and without
// the AckReq bit: a kept later copy on an earlier stage was a wrong frame).
func TestTraceLossyWalkFrameBytes(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "lossy.json")
	require.NoError(t, os.WriteFile(plan, []byte(`{"seed": 15, "rules": [
  {"point": "wire.tx", "action": "drop", "prob": 0.1},
  {"point": "wire.rx", "action": "corrupt", "prob": 0.05},
  {"point": "wire.tx", "action": "delay", "prob": 0.05, "delay_ps": 100000},
  {"point": "wire.tx", "action": "duplicate", "prob": 0.05},
  {"point": "wire.tx", "action": "reorder", "prob": 0.05},
  {"point": "wire.rx", "action": "drop", "prob": 0.05}]}`), 0o644))
	for _, tc := range []struct {
		name          string
		args          []string
		framesDropped bool
	}{
		{"resends past the frame cap", []string{"--size", "40000", "--mtu", "256", "--batch", "3"}, true},
		{"within the cap", []string{"--size", "40000", "--mtu", "1024"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pcapFile := filepath.Join(dir, "walk.pcap")
			var out, errb bytes.Buffer
			require.Equal(t, 0, run(append([]string{"trace", "--json", "--pcap", pcapFile, "--faults", plan}, tc.args...), &out, &errb), errb.String())
			var j walkFrames
			require.NoError(t, json.Unmarshal(out.Bytes(), &j))
			dropped := false
			for _, w := range j.Warnings {
				dropped = dropped || w.Name == "frames_dropped"
			}
			require.Equal(t, tc.framesDropped, dropped, "frames_dropped warning")
			f, err := os.Open(pcapFile)
			require.NoError(t, err)
			defer f.Close()
			r, err := pcapgo.NewReader(f)
			require.NoError(t, err)
			n, shown := 0, 0
			for _, s := range j.Stages {
				if s.Name != "wire" {
					continue
				}
				data, _, err := r.ReadPacketData()
				require.NoError(t, err, "wire stage %d has no frame in the capture", n+1)
				n++
				if s.FrameHex == "" {
					require.True(t, dropped, "wire stage %d shows no frame, none dropped", n)
					continue
				}
				shown++
				require.Equal(t, fmt.Sprintf("%x", data), s.FrameHex, "wire stage %d: frame_hex is not the captured frame", n)
			}
			_, _, err = r.ReadPacketData()
			require.Error(t, err, "more frames captured than wire stages")
			require.Positive(t, shown)
		})
	}
}
