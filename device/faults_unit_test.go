package device_test

import (
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/testbed"
	"github.com/stretchr/testify/require"
)

// A BlueFlame write too short to hold a control segment is dropped and
// counted, with or without a fault plan and checked mode.
func TestBlueFlameShort(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Check = true
	w, err := testbed.New(cfg)
	require.NoError(t, err)
	defer w.Close()
	d := w.Hosts[0].Dev
	d.BlueFlame(0, 3, 0, []byte{1, 2, 3})
	require.Equal(t, uint64(1), d.Counters().Value(device.CtrBFShort))
}

// Commands fail after a device fatal error; teardown still works.
func TestFatalCommands(t *testing.T) {
	w, err := testbed.New(testbed.DefaultConfig())
	require.NoError(t, err)
	defer w.Close()
	d := w.Hosts[0].Dev
	pd, err := d.AllocPD()
	require.NoError(t, err)
	d.EnterFatal(w.Eng.Now(), 0x1, "test")
	fatal, synd := d.Fatal()
	require.True(t, fatal)
	require.Equal(t, uint8(1), synd)
	_, err = d.AllocPD()
	require.Error(t, err)
	_, err = d.QueryDevice()
	require.Error(t, err)
	require.NoError(t, d.DeallocPD(pd.PDN))
	require.NotZero(t, d.Counters().Value(device.CtrCmdFailedFatal))
	d.EnterFatal(w.Eng.Now(), 0x2, "again") // once only
	_, synd = d.Fatal()
	require.Equal(t, uint8(1), synd)
}
