package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// TestMaxInlineIsTheDevices: a QP's max_inline_data (QP.Cap) is at most the
// device's inline limit on every control path, and the provider refuses
// what the device would fail. Over uverbs bytes no answer carries the
// device-wide limit (ibv_device_attr has none), so the provider takes the
// max_inline_data CREATE_QP answers for the room it asked. Before the fix
// it ignored that answer: over uverbs a QP on a device taking 64 inline
// bytes reported 76 (the room in its WQE) and posted 65..76-byte inline
// sends that completed LOC_LEN_ERR, while the device's Go interface
// reported 64 and refused them with ErrInlineTooBig.
func TestMaxInlineIsTheDevices(t *testing.T) {
	for _, c := range []struct {
		name    string
		uverbs  bool
		devMax  int
		ask     int // max_inline_data asked at CREATE_QP (testbed.NoInline: 0)
		wantCap int // the room in a WQE of 2 SGEs is 76 bytes
	}{
		{"go_interface_64", false, 64, 32, 64},
		{"uverbs_64", true, 64, 32, 64},
		{"uverbs_64_ask_0", true, 64, testbed.NoInline, 64},
		{"uverbs_512", true, 512, 32, 76},
		{"go_interface_512", false, 512, 32, 76},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testbed.DefaultConfig()
			cfg.UverbsControl = c.uverbs
			cfg.Device.Caps.MaxInline = c.devMax
			w, err := testbed.New(cfg)
			require.NoError(t, err)
			t.Cleanup(w.Close)
			eps, err := w.ConnectRC(testbed.ConnOpts{MaxInline: c.ask, MaxSGE: 2})
			require.NoError(t, err)
			req, rsp := eps[0], eps[1]
			require.Equal(t, c.wantCap, req.QP.Cap().MaxInline)
			send := func(n uint32) (int, error) {
				return req.QP.PostSend([]provider.SendWR{{WRID: uint64(n), Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled | provider.SendInline,
					SGL: []provider.SGE{req.MR.SGE(0, n)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}})
			}
			max := uint32(c.wantCap)
			_, err = send(max + 1)
			require.ErrorIs(t, err, provider.ErrInlineTooBig)
			n, err := send(max)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			wcs, err := testbed.Wait(req.SendCQ, 1)
			require.NoError(t, err)
			require.Equal(t, provider.WCSuccess, wcs[0].Status)
		})
	}
}
