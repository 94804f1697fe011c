package test

import (
	"testing"

	"github.com/softnic/softnic/fault"
	"github.com/stretchr/testify/require"
)

// TestCountersAgreeWithTheWire: under many QPs, one kind of fault on the
// requests only (node 0's frames): what node 1 received is what node 0
// sent, less the frames dropped on the wire and the corrupted ones a
// check caught (ICRC or the parser: a flip in the UDP checksum, which
// RoCEv2 does not use and the ICRC masks, goes through), plus the
// duplicates, each of which node 1 counts as a duplicate request; losses
// are retransmitted, and nothing is without one.
func TestCountersAgreeWithTheWire(t *testing.T) {
	for _, a := range []fault.Action{fault.Drop, fault.Duplicate, fault.Corrupt} {
		t.Run(a.String(), func(t *testing.T) {
			r := fault.Rule{Point: fault.WireTx, Action: a, Prob: 0.03, Byte: -1, Match: fault.Match{Node: node(0)}}
			w, _, c := runScale(t, scaleCfg{pairs: 8, depth: 16, msgs: 60, slot: 4096, mtu: 1024, seed: 3, rules: []fault.Rule{r}})
			drop, dup, bad := w.Wire.Get("wire_fault_drop"), w.Wire.Get("wire_fault_duplicate"), w.Wire.Get("wire_fault_corrupt")
			require.NotZero(t, drop+dup+bad, "the rule fired")
			caught := c["1rx_drop_bad_icrc"] + c["1rx_drop_malformed"]
			require.LessOrEqual(t, caught, bad)
			if a == fault.Corrupt {
				require.NotZero(t, caught)
			}
			require.Equal(t, c["0sent_pkts"]-drop-caught+dup, c["1rcvd_pkts"])
			require.Equal(t, dup, c["1duplicate_request"])
			if drop+caught > 0 {
				require.NotZero(t, c["0roce_adp_retrans"], "losses are sent again")
			} else {
				require.Zero(t, c["0roce_adp_retrans"], "nothing sent again without a loss")
			}
		})
	}
}
