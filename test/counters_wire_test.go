package test

import (
	"testing"

	"github.com/softnic/softnic/fault"
	"github.com/stretchr/testify/require"
)

// TestCountersAgreeWithTheWire: under many QPs, one kind of fault on the
// requests only (node 0's frames): what node 1 received is what node 0
// sent, less the frames dropped or corrupted on the wire (each corrupted
// one dropped by a check and counted), plus the duplicates, each of which
// node 1 counts as a duplicate request; every loss is retransmitted.
func TestCountersAgreeWithTheWire(t *testing.T) {
	for _, a := range []fault.Action{fault.Drop, fault.Duplicate, fault.Corrupt} {
		t.Run(a.String(), func(t *testing.T) {
			r := fault.Rule{Point: fault.WireTx, Action: a, Prob: 0.03, Byte: -1, Match: fault.Match{Node: node(0)}}
			w, _, c := runScale(t, scaleCfg{pairs: 8, depth: 16, msgs: 60, slot: 4096, mtu: 1024, seed: 3, rules: []fault.Rule{r}})
			drop, dup, bad := w.Wire.Get("wire_fault_drop"), w.Wire.Get("wire_fault_duplicate"), w.Wire.Get("wire_fault_corrupt")
			require.NotZero(t, drop+dup+bad, "the rule fired")
			require.Equal(t, c["0sent_pkts"]-drop-bad+dup, c["1rcvd_pkts"])
			require.Equal(t, bad, c["1rx_drop_bad_icrc"]+c["1rx_drop_malformed"], "every corrupted frame caught")
			require.Equal(t, dup, c["1duplicate_request"])
			require.GreaterOrEqual(t, c["0roce_adp_retrans"], drop+bad, "every lost request sent again")
			if drop+bad == 0 {
				require.Zero(t, c["0roce_adp_retrans"], "nothing sent again without a loss")
			}
		})
	}
}
