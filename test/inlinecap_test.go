package test

import (
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// TestQPAtReportedMaxInline creates a QP of every type asking the
// max_inline the context reports (DeviceAttr.MaxInline), in process and
// over uverbs. Over uverbs that figure is the provider's (ibv_device_attr
// has none) and was max_sq_desc_sz - 16 - 4 = 1004, which no QP could
// ask: an RC WQE also has its raddr and atomic segments (48 bytes in
// all), a UD one its datagram segment (64), so CREATE_QP failed with
// EINVAL for every QP type at the cap the context reported.
func TestQPAtReportedMaxInline(t *testing.T) {
	for _, c := range []struct {
		name   string
		uverbs bool
		typ    provider.QPType
	}{
		{"RC in process", false, provider.QPTypeRC},
		{"UC in process", false, provider.QPTypeUC},
		{"UD in process", false, provider.QPTypeUD},
		{"RC over uverbs", true, provider.QPTypeRC},
		{"UC over uverbs", true, provider.QPTypeUC},
		{"UD over uverbs", true, provider.QPTypeUD},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := controlWorld(t, c.uverbs, nil).Hosts[0].Ctx
			a := ctx.Attr()
			require.Positive(t, a.MaxInline)
			pd, err := ctx.AllocPD()
			require.NoError(t, err)
			cq, err := ctx.CreateCQ(16)
			require.NoError(t, err)
			qp, err := ctx.CreateQP(pd, provider.QPInitAttr{Type: c.typ, SendCQ: cq, RecvCQ: cq,
				Cap: provider.QPCap{MaxSendWR: 16, MaxSendSGE: 1, MaxInline: a.MaxInline}})
			require.NoError(t, err, "a QP asking max_inline %d", a.MaxInline)
			require.Positive(t, qp.Cap().MaxInline)
			require.NoError(t, qp.Destroy())
			_, err = ctx.CreateQP(pd, provider.QPInitAttr{Type: c.typ, SendCQ: cq, RecvCQ: cq,
				Cap: provider.QPCap{MaxSendWR: 16, MaxSendSGE: 1, MaxInline: a.MaxInline + 1}})
			require.ErrorIs(t, err, provider.ErrInvalidArg)
		})
	}
}
