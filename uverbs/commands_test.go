package uverbs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// CoreSizes (used by ParseWrite without allocating) agrees with the
// structs NewRequest and NewResponse hand out, for every command.
func TestCommandTables(t *testing.T) {
	for _, ex := range []bool{false, true} {
		sizes, cmds := coreSizes, writeCommands
		if ex {
			sizes, cmds = exCoreSizes, exCommands
		}
		require.Equal(t, len(sizes), len(cmds))
		for c := range cmds {
			req, resp, ok := CoreSizes(c, ex)
			require.True(t, ok, "%v", c)
			require.Equal(t, req, NewRequest(c, ex).Size(), "%v request", c)
			if r := NewResponse(c, ex); r != nil {
				require.Equal(t, resp, r.Size(), "%v response", c)
			} else {
				require.Zero(t, resp, "%v has no response struct", c)
			}
		}
	}
	require.Nil(t, NewRequest(CmdResizeCQ, false))
	require.Nil(t, NewResponse(CmdModifyQP, false))
	require.Nil(t, NewRequest(CmdGetContext, true))
}
