package test

import (
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// TestSRQSGEsOverUverbs creates SRQs of every max_sge up to the device's,
// in process and over uverbs (the daemon's path): each is created, holds
// at least the SGEs asked, and takes a receive of that many. Over uverbs
// the provider asks CREATE_SRQ for the SGEs its power-of-two WQE stride
// holds, as libmlx5 does (31 for 30), and uverbsdev refused anything above
// max_sge: every SRQ of 16 to 30 SGEs failed with EINVAL over uverbs and
// through softnic serve, while it worked in process. max_srq_sge is
// mlx5_ib's max_rq_sg - 1, one more than max_sge (31 against 30: an SRQ's
// WQE has no send segments); it was reported as max_sge, so an
// application sizing its SRQ by it, as on a ConnectX-5, got one SGE less.
// One more than max_srq_sge is refused.
func TestSRQSGEsOverUverbs(t *testing.T) {
	for _, c := range []struct {
		name   string
		uverbs bool
	}{{"in process", false}, {"over uverbs", true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := controlWorld(t, c.uverbs, nil).Hosts[0].Ctx
			pd, err := ctx.AllocPD()
			require.NoError(t, err)
			buf, err := ctx.AllocBuffer(4096, 4096)
			require.NoError(t, err)
			mr, err := pd.RegMR(buf.Addr, 4096, provider.AccessLocalWrite)
			require.NoError(t, err)
			a := ctx.Attr()
			require.Equal(t, a.MaxSGE+1, a.MaxSRQSGE, "max_srq_sge")
			for n := 1; n <= a.MaxSRQSGE; n++ {
				srq, err := pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 4, MaxSGE: n})
				require.NoError(t, err, "an SRQ of %d SGEs", n)
				a, err := srq.Query()
				require.NoError(t, err)
				require.GreaterOrEqual(t, a.MaxSGE, n)
				sgl := make([]provider.SGE, n)
				for i := range sgl {
					sgl[i] = mr.SGE(uint64(i*16), 16)
				}
				_, err = srq.PostRecv([]provider.RecvWR{{WRID: 1, SGL: sgl}})
				require.NoError(t, err)
				require.NoError(t, srq.Destroy())
			}
			_, err = pd.CreateSRQ(provider.SRQInitAttr{MaxWR: 4, MaxSGE: a.MaxSRQSGE + 1})
			require.ErrorIs(t, err, provider.ErrInvalidArg)
		})
	}
}
