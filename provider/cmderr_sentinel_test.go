package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestDeviceRefusalMatchesSentinel: a command the device refuses matches
// the provider sentinel of the errno the kernel returns for its status
// (EINVAL: ErrInvalidAttr for MODIFY_QP, ErrInvalidArg otherwise), on the
// device's Go control interface as over uverbs bytes, so that an
// errors.Is check does not depend on the backend. Before the fix only the
// uverbs backend matched: in process a pkey index the port does not have
// (which the provider leaves to the device, as libmlx5 leaves it to the
// kernel) failed with a bare *mlx5.CmdError, and errors.Is(err,
// provider.ErrInvalidAttr) was false.
func TestDeviceRefusalMatchesSentinel(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, w *testbed.World) error
		want error
	}{
		{"modify_qp_bad_pkey_index", func(t *testing.T, w *testbed.World) error {
			qp := rcQP(t, w.Hosts[0])
			return qp.Modify(&provider.QPAttr{QPState: provider.QPStateInit, PKeyIndex: 5, Port: 1},
				provider.AttrState|provider.AttrPKeyIndex|provider.AttrPort|provider.AttrAccessFlags)
		}, provider.ErrInvalidAttr},
		{"modify_qp_port_2", func(t *testing.T, w *testbed.World) error {
			qp := rcQP(t, w.Hosts[0])
			return qp.Modify(&provider.QPAttr{QPState: provider.QPStateInit, Port: 2},
				provider.AttrState|provider.AttrPKeyIndex|provider.AttrPort|provider.AttrAccessFlags)
		}, provider.ErrInvalidAttr},
		{"to_rtr_bad_sgid_index", func(t *testing.T, w *testbed.World) error {
			qp := rcQP(t, w.Hosts[0])
			require.NoError(t, qp.ToInit(provider.ConnectAttr{}))
			a := provider.DefaultConnectAttr()
			a.Peer = provider.Peer{QPN: 0x200, GID: w.Hosts[1].ID.IP.As16(), MAC: w.Hosts[1].ID.MAC}
			a.SGIDIndex = 7
			return qp.ToRTR(a)
		}, provider.ErrInvalidAttr},
	}
	for _, uv := range []bool{false, true} {
		for _, c := range cases {
			name := c.name
			if uv {
				name += "_uverbs"
			}
			t.Run(name, func(t *testing.T) {
				cfg := testbed.DefaultConfig()
				cfg.UverbsControl = uv
				w, err := testbed.New(cfg)
				require.NoError(t, err)
				t.Cleanup(w.Close)
				err = c.run(t, w)
				require.ErrorIs(t, err, c.want)
				var oe *provider.OpError
				require.ErrorAs(t, err, &oe)
				require.Equal(t, "modify_qp", oe.Op)
			})
		}
	}
}

// rcQP is an RC QP in RESET on h.
func rcQP(t *testing.T, h *testbed.Host) *provider.QP {
	t.Helper()
	pd, err := h.Ctx.AllocPD()
	require.NoError(t, err)
	cq, err := h.Ctx.CreateCQ(16)
	require.NoError(t, err)
	qp, err := h.Ctx.CreateQP(pd, provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	return qp
}
