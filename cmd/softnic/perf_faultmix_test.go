package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// faultMix is the mix the closing note of issue 11 runs by hand: loss,
// corruption, duplicates and reordering on the simulated wire at once.
const faultMix = `{"seed": %d, "rules": [
 {"point": "wire.tx", "action": "drop", "prob": 0.03},
 {"point": "wire.rx", "action": "corrupt", "prob": 0.01},
 {"point": "wire.tx", "action": "duplicate", "prob": 0.02},
 {"point": "wire.tx", "action": "reorder", "prob": 0.02}]}`

// TestPerfFaultMixEveryTest: every perftest test on every transport it
// allows, over a wire that loses, corrupts, duplicates and reorders
// frames, ends (in the command's virtual-time budget, never a hang) and
// ends the same way twice. RC recovers: the run succeeds and the counters
// show the retransmissions that paid for it. UC and UD do not retransmit:
// a run either gets through or fails saying so (the run is stuck, or
// datagrams were lost), never with another error.
func TestPerfFaultMixEveryTest(t *testing.T) {
	type combo struct {
		test, conn string
		extra      []string
	}
	var combos []combo
	for _, test := range []string{"send_lat", "write_lat", "read_lat", "atomic_lat", "send_bw", "write_bw", "read_bw", "atomic_bw"} {
		for _, conn := range []string{"RC", "UC", "UD"} {
			kind := strings.SplitN(test, "_", 2)[0]
			if conn == "UD" && kind != "send" || conn == "UC" && (kind == "read" || kind == "atomic") {
				continue // perftest refuses these too
			}
			combos = append(combos, combo{test: test, conn: conn})
		}
	}
	combos = append(combos,
		combo{"write_bw", "RC", []string{"-b"}},                                 // both directions at once
		combo{"read_bw", "RC", []string{"-s", "65536", "-n", "40"}},             // 64 packets a READ response
		combo{"send_bw", "RC", []string{"-s", "262144", "-n", "20", "-q", "4"}}) // go-back-N over 256 packets
	unreliableEnds := map[string]int{}
	for _, seed := range []int{3, 5, 8, 13} {
		plan := writePlan(t, fmt.Sprintf("mix%d.json", seed), fmt.Sprintf(faultMix, seed))
		for _, c := range combos {
			name := fmt.Sprintf("seed=%d/%s/%s%s", seed, c.test, c.conn, strings.Join(c.extra, ""))
			t.Run(name, func(t *testing.T) {
				args := []string{c.test, "-c", c.conn, "-n", "200", "-m", "1024", "--faults", plan, "--json"}
				switch {
				case strings.HasPrefix(c.test, "atomic"):
				case c.conn == "UD":
					args = append(args, "-s", "1024")
				default:
					args = append(args, "-s", "8192") // eight packets a message
				}
				if strings.HasSuffix(c.test, "_bw") {
					args = append(args, "-q", "2")
				}
				args = append(args, c.extra...) // the later of a flag given twice wins
				out, stderr, code := runPerfCmd(t, args...)
				out2, stderr2, code2 := runPerfCmd(t, args...)
				require.Equal(t, code, code2, "two runs with the same plan end differently")
				require.Equal(t, out, out2, "two runs with the same plan differ")
				require.Equal(t, stderr, stderr2, "two runs with the same plan differ")
				if c.conn == "RC" {
					require.Equal(t, 0, code, stderr)
					var run struct {
						Counters map[string]map[string]uint64 `json:"counters"`
					}
					require.NoError(t, json.Unmarshal([]byte(out), &run), out)
					w := run.Counters["wire"]
					require.Positive(t, w["wire_fault_drop"]+w["wire_fault_corrupt"], "the plan fired on the wire")
					var retrans uint64
					for _, node := range []string{"node0", "node1"} {
						retrans += run.Counters[node]["retransmitted_pkts"]
					}
					require.Positive(t, retrans, "RC recovered its losses by retransmission")
					return
				}
				switch code {
				case 0:
					unreliableEnds["completed"]++
				case 1:
					ok := strings.Contains(stderr, "the run is stuck") || strings.Contains(stderr, "datagrams received")
					require.True(t, ok, "a %s run under loss fails by naming it: %s", c.conn, stderr)
					require.Contains(t, stderr, "has no retransmission", stderr)
					unreliableEnds["failed"]++
				default:
					t.Fatalf("exit %d: %s", code, stderr)
				}
			})
		}
	}
	// Both endings happen, so neither branch above is dead.
	require.Positive(t, unreliableEnds["failed"], "no UC/UD run lost a message: the mix is too mild to test them")
	require.Positive(t, unreliableEnds["completed"], "every UC/UD run failed: the mix is too harsh to test them")
}
