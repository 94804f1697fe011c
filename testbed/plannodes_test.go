package testbed_test

import (
	"testing"

	"github.com/softnic/softnic/fault"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// TestPlanNodesExist: a rule for a node the world does not have is refused
// when the world is built (it used to run and report "none fired").
func TestPlanNodesExist(t *testing.T) {
	tests := []struct {
		name     string
		plan     string
		loopback bool
		want     string // "" accepted
	}{
		{"node 1 of 2", `{"rules":[{"point":"cq","action":"drop","match":{"node":1}}]}`, false, ""},
		{"no node", `{"rules":[{"point":"cq","action":"drop"}]}`, false, ""},
		{"node 2 of 2", `{"rules":[{"point":"cq","action":"drop"},{"point":"wire.tx","action":"drop","match":{"node":2}}]}`, false,
			"rule 1 (wire.tx drop always node=2): match.node 2, but this world has nodes 0..1"},
		{"timed rule, node 5", `{"rules":[{"point":"device","action":"fatal","at_ps":5,"match":{"node":5}}]}`, false, "match.node 5"},
		{"loopback has node 0 only", `{"rules":[{"point":"cq","action":"drop","match":{"node":1}}]}`, true, "nodes 0..0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := fault.Parse([]byte(tc.plan))
			require.NoError(t, err)
			cfg := testbed.DefaultConfig()
			cfg.Faults, cfg.Loopback = p, tc.loopback
			w, err := testbed.New(cfg)
			if tc.want == "" {
				require.NoError(t, err)
				w.Close()
				return
			}
			require.Nil(t, w)
			require.ErrorIs(t, err, fault.ErrInvalidPlan)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
