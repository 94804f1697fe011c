package serve_test

import (
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/softnic/softnic/attach"
	"github.com/softnic/softnic/mmioring"
	"github.com/softnic/softnic/serve"
	"github.com/stretchr/testify/require"
)

// fuzzDaemon starts a daemon and one raw client for a fuzz target.
func fuzzDaemon(f *testing.F) (*serve.Daemon, *raw) {
	sock := filepath.Join(f.TempDir(), "fuzz.sock")
	d, err := serve.New(serve.Config{Socket: sock, Devices: 2})
	require.NoError(f, err)
	go d.Serve()
	f.Cleanup(func() { d.Close() })
	return d, dialRaw(f, sock, "softnic0", 0x10000000)
}

// alive checks that the daemon still answers the client.
func alive(t *testing.T, r *raw) {
	typ, _, err := r.send(attach.TSim, attach.EncodeSim(nil, attach.SimPendingEvents, 0))
	require.NoError(t, err, "the daemon stopped answering")
	require.Equal(t, attach.TSimResp, typ)
}

// FuzzSocket sends arbitrary messages of every type on a live
// connection: each gets an answer, and the daemon keeps serving.
func FuzzSocket(f *testing.F) {
	f.Add(uint16(attach.TUverbs), []byte{0, 0, 0, 0, 1, 0, 0, 0})
	f.Add(uint16(attach.TSim), attach.EncodeSim(nil, attach.SimReadCompEvents, 1, 1000))
	f.Add(uint16(attach.TSim), attach.EncodeSim(nil, attach.SimResizeCQ, 1, 64, 64, 0, 0))
	f.Add(uint16(attach.TAttach), make([]byte, attach.AttachReqSize))
	f.Add(uint16(0), []byte("hello"))
	_, r := fuzzDaemon(f)
	f.Fuzz(func(t *testing.T, typ uint16, p []byte) {
		if len(p) > attach.MaxPayload {
			p = p[:attach.MaxPayload]
		}
		if attach.Type(typ) == attach.TDetach && len(p) == 0 {
			t.Skip("a well-formed DETACH ends the connection by design")
		}
		_, _, err := r.send(attach.Type(typ), p)
		require.NoError(t, err)
		alive(t, r)
	})
}

// FuzzRing pushes arbitrary well-formed records (any offset, data, mask,
// time; doorbells and BlueFlame lines into the device's UARs among them)
// and then a sync call, which must be answered.
func FuzzRing(f *testing.F) {
	seed := make([]byte, 32)
	binary.LittleEndian.PutUint64(seed[8:], 3*4096+0x800)
	f.Add(seed)
	seed2 := make([]byte, 64)
	seed2[0] = 2
	binary.LittleEndian.PutUint64(seed2[8:], 3*4096+0x900)
	binary.LittleEndian.PutUint64(seed2[24:], ^uint64(0))
	f.Add(seed2)
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x00\x18\x00\x00\x00\x00\x00\x00\x00"))
	_, r := fuzzDaemon(f)
	now := int64(0)
	f.Fuzz(func(t *testing.T, data []byte) {
		le := binary.LittleEndian
		for len(data) >= 32 {
			c := data[:32]
			data = data[32:]
			var rec mmioring.Record
			off := le.Uint64(c[8:]) % (8 << 20) // inside a 8 MiB BAR, and beyond it
			now += int64(le.Uint32(c[16:]) % 100000)
			switch c[0] % 3 {
			case 0:
				rec = mmioring.Store64(off&^7, le.Uint64(c[24:]), now)
			case 1:
				rec = mmioring.Store32(off&^3, le.Uint32(c[24:]), now)
			case 2:
				var line [64]byte
				for i := range line {
					line[i] = c[(i+1)%32]
				}
				mask := le.Uint64(c[24:])
				if mask == 0 {
					mask = 1
				}
				rec = mmioring.Line(off&^63, &line, mask, now)
			}
			rec.QPN = le.Uint32(c[4:])
			require.NoError(t, r.prod.Push(&rec, time.Now().Add(time.Second)))
		}
		rep, err := r.prod.Call(attach.OpSync, 0, now, time.Now().Add(2*time.Second))
		require.NoError(t, err)
		require.Zero(t, rep.Status)
		now = max(now, rep.Time)
		alive(t, r)
	})
}
