package device_test

import (
	"os"
	"strings"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/stretchr/testify/require"
)

// TestCheckRulesDocumented: docs/faults.md has a row for every rule the
// checker reports, with its message.
func TestCheckRulesDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/faults.md")
	require.NoError(t, err)
	doc := string(b)
	for _, r := range device.CheckRules {
		row := "| " + r.Rule + " | `" + r.Name + "` | " + r.Message + " |"
		require.True(t, strings.Contains(doc, row), "docs/faults.md lacks the row %q", row)
	}
}
