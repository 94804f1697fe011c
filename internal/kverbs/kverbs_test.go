package kverbs

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/uverbs"
	"github.com/stretchr/testify/require"
)

// fakeSys writes a sysfs tree: files (relative path -> content) and
// symlinks (relative path -> target).
func fakeSys(t *testing.T, files, links map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(c+"\n"), 0o644))
	}
	for p, target := range links {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.Symlink(target, full))
	}
	return root
}

func rxeTree() map[string]string {
	return map[string]string{
		"class/infiniband_verbs/abi_version":         "6",
		"class/infiniband_verbs/uverbs0/ibdev":       "rxe0",
		"class/infiniband_verbs/uverbs0/abi_version": "2",
		"class/infiniband_verbs/uverbs0/dev":         "231:192",
		"class/infiniband/rxe0/node_type":            "1: CA",
		"class/infiniband/rxe0/parent":               "eth0",
		"class/infiniband/rxe0/fw_ver":               "0.0.0",
	}
}

func TestDiscover(t *testing.T) {
	with := func(m map[string]string, k, v string) map[string]string {
		c := map[string]string{}
		for a, b := range m {
			c[a] = b
		}
		if v == "" {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	mlx := with(with(with(rxeTree(), "class/infiniband_verbs/uverbs1/ibdev", "mlx5_0"),
		"class/infiniband_verbs/uverbs1/abi_version", "1"), "class/infiniband/mlx5_0/node_type", "1: CA")
	mlxLinks := map[string]string{"class/infiniband/mlx5_0/device/driver": "../../../bus/pci/drivers/mlx5_core"}
	cases := []struct {
		name   string
		files  map[string]string
		links  map[string]string
		find   string
		driver Driver
		abi    int
		err    error
	}{
		{name: "rxe", files: rxeTree(), find: "rxe0", driver: DriverRXE, abi: 2},
		{name: "mlx5 by its PCI driver", files: mlx, links: mlxLinks, find: "mlx5_0", driver: DriverMLX5, abi: 1},
		{name: "no infiniband_verbs class", files: map[string]string{"class/net/lo/address": "0"}, find: "rxe0", err: ErrNoDevice},
		{name: "class without devices", files: map[string]string{"class/infiniband_verbs/abi_version": "6"}, find: "rxe0", err: ErrNoDevice},
		{name: "unknown name", files: rxeTree(), find: "mlx5_7", err: ErrNoDevice},
		{name: "core ABI 5", files: with(rxeTree(), "class/infiniband_verbs/abi_version", "5"), find: "rxe0", err: ErrABI},
		{name: "rxe driver ABI 3", files: with(rxeTree(), "class/infiniband_verbs/uverbs0/abi_version", "3"), find: "rxe0", err: ErrABI},
		{name: "half-gone entry skipped", files: with(rxeTree(), "class/infiniband_verbs/uverbs0/ibdev", ""), find: "rxe0", err: ErrNoDevice},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := fakeSys(t, c.files, c.links)
			r := Root{Sys: root, Dev: filepath.Join(root, "dev")}
			d, err := r.Find(c.find)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.driver, d.Driver)
			require.Equal(t, c.abi, d.DriverABI)
			require.Equal(t, filepath.Join(root, "dev", d.Uverbs), d.Path)
		})
	}
}

func TestOpenMissingNode(t *testing.T) {
	root := fakeSys(t, rxeTree(), nil)
	r := Root{Sys: root, Dev: filepath.Join(root, "dev")}
	d, err := r.Find("rxe0")
	require.NoError(t, err)
	_, err = Open(d)
	require.ErrorIs(t, err, ErrNoDevice)
}

const base = 0x7000_0000_0000

func TestPrepareWrite(t *testing.T) {
	var req [64]byte
	n, err := uverbs.EncodeWrite(req[:], uverbs.CmdAllocPD, &uverbs.AllocPD{Response: 1 << 12}, nil, 8)
	require.NoError(t, err)
	dealloc := make([]byte, 64)
	k, err := uverbs.EncodeWrite(dealloc, uverbs.CmdDeallocPD, &uverbs.DeallocPD{PDHandle: 3}, nil, 0)
	require.NoError(t, err)
	// Commands without a response, sent with out_words anyway: the kernel
	// ignores them, so must the transport.
	deallocOut := append([]byte(nil), dealloc[:k]...)
	binary.NativeEndian.PutUint16(deallocOut[6:], 2)
	modify := make([]byte, 256)
	m, err := uverbs.EncodeWrite(modify, uverbs.CmdModifyQP, &uverbs.ModifyQP{Dest: uverbs.QPDest{DGID: [16]byte{0xfe, 0x80, 1, 2, 3, 4, 5, 6}}, QPHandle: 1}, nil, 8)
	require.NoError(t, err)
	cases := []struct {
		name    string
		req     []byte
		respLen int
		errno   syscall.Errno
		patched bool
	}{
		{name: "DEALLOC_PD with out_words: no response word", req: deallocOut, respLen: 8},
		{name: "MODIFY_QP with out_words: its dgid untouched", req: modify[:m], respLen: 8},
		{name: "response word rewritten", req: req[:n], respLen: 8, patched: true},
		{name: "response buffer too short", req: req[:n], respLen: 4, errno: syscall.EFAULT},
		{name: "in_words disagree", req: req[:n-4], respLen: 8, errno: syscall.EINVAL},
		{name: "no header", req: req[:4], respLen: 8, errno: syscall.EINVAL},
		{name: "no response: untouched", req: dealloc[:k], respLen: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]byte, maxReq)
			f, err := prepare(dst, c.req, c.respLen, base, uverbs.DriverRXE)
			if c.errno != 0 {
				require.ErrorIs(t, err, c.errno)
				return
			}
			require.NoError(t, err)
			require.False(t, f.ioctl)
			if c.patched {
				require.Equal(t, uint64(base), binary.NativeEndian.Uint64(dst[8:]))
				require.Equal(t, "ALLOC_PD", f.name)
			} else {
				require.Equal(t, c.req, dst[:len(c.req)])
			}
		})
	}
}

func TestPrepareIoctl(t *testing.T) {
	const hdr = uverbs.IoctlHdrSize + 4*uverbs.AttrSize
	build := func(off uint64) []byte {
		b := make([]byte, 256)
		io, err := uverbs.QueryGIDEntryIoctl(b, 1, 1, off, uverbs.DriverMLX5)
		require.NoError(t, err)
		return io.Bytes()
	}
	cases := []struct {
		name    string
		req     []byte
		respLen int
		errno   syscall.Errno
	}{
		{name: "PTR_OUT to the response, driver id stamped", req: build(hdr), respLen: hdr + uverbs.GIDEntrySize},
		{name: "PTR_OUT beyond the response", req: build(hdr + 8), respLen: hdr + uverbs.GIDEntrySize, errno: syscall.EFAULT},
		{name: "PTR_OUT over the attribute array", req: build(0), respLen: hdr + uverbs.GIDEntrySize, errno: syscall.EFAULT},
		{name: "unknown method", req: func() []byte {
			b := build(hdr)
			binary.NativeEndian.PutUint16(b[4:], 0x77)
			return b
		}(), respLen: hdr + uverbs.GIDEntrySize, errno: syscall.EPROTONOSUPPORT},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]byte, maxReq)
			f, err := prepare(dst, c.req, c.respLen, base, uverbs.DriverRXE)
			if c.errno != 0 {
				require.ErrorIs(t, err, c.errno)
				return
			}
			require.NoError(t, err)
			require.True(t, f.ioctl)
			h := uverbs.IoctlHdr(dst[:f.hdrLen])
			require.Equal(t, uverbs.DriverRXE, h.DriverID())
			a, ok := h.FindAttr(uverbs.AttrQueryGIDEntryRespEntry)
			require.True(t, ok)
			require.Equal(t, uint64(base+hdr), a.Data())
			resp := make([]byte, c.respLen)
			finishIoctl(f, dst, resp)
			a, _ = uverbs.IoctlHdr(resp[:f.hdrLen]).FindAttr(uverbs.AttrQueryGIDEntryRespEntry)
			require.Equal(t, uint64(hdr), a.Data(), "nominal offset restored")
		})
	}
}

func TestDecodeAsyncEvent(t *testing.T) {
	good := make([]byte, 16)
	binary.NativeEndian.PutUint64(good, 7)
	binary.NativeEndian.PutUint32(good[8:], 1)
	cases := []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"16 bytes", good, true},
		{"short", good[:12], false},
		{"long", append(append([]byte{}, good...), 0), false},
		{"empty", nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := DecodeAsyncEvent(c.b)
			if !c.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, uint64(7), ev.Element)
			require.Equal(t, uint32(1), ev.EventType)
		})
	}
}

// FuzzPrepare: whatever bytes a caller hands the transport, prepare never
// panics, and every address it writes lies in the response buffer.
func FuzzPrepare(f *testing.F) {
	b := make([]byte, 256)
	n, _ := uverbs.EncodeWrite(b, uverbs.CmdAllocPD, &uverbs.AllocPD{Response: 1 << 12}, nil, 8)
	f.Add(append([]byte{}, b[:n]...), 8)
	io, _ := uverbs.QueryGIDEntryIoctl(make([]byte, 256), 1, 0, uverbs.IoctlHdrSize+4*uverbs.AttrSize, uverbs.DriverRXE)
	f.Add(append([]byte{}, io.Bytes()...), 200)
	f.Fuzz(func(t *testing.T, req []byte, respLen int) {
		dst := make([]byte, maxReq)
		fm, err := prepare(dst, req, respLen, base, uverbs.DriverRXE)
		if err != nil {
			var ue *uverbs.Error
			var fe *uverbs.FormatError
			if !errors.As(err, &ue) && !errors.As(err, &fe) {
				t.Fatalf("error of unknown kind: %v", err)
			}
			return
		}
		if fm.ioctl {
			h := uverbs.IoctlHdr(dst[:fm.hdrLen])
			for _, o := range fm.outs {
				a := h.Attr(o.i)
				if a.Data() < base || a.Data()+uint64(a.Len()) > base+uint64(respLen) {
					t.Fatalf("attribute %d points at %#x+%d outside the response", o.i, a.Data(), a.Len())
				}
			}
			if fm.respEnd > respLen {
				t.Fatalf("respEnd %d > %d", fm.respEnd, respLen)
			}
		} else if fm.outLen > 0 {
			if fm.outLen > respLen || binary.NativeEndian.Uint64(dst[8:]) != base {
				t.Fatalf("write response %d bytes, buffer %d", fm.outLen, respLen)
			}
		}
	})
}

// FuzzDecodeAsyncEvent: any record read from the async fd decodes or is
// refused, never a panic.
func FuzzDecodeAsyncEvent(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := DecodeAsyncEvent(b)
		if (err == nil) != (len(b) == 16) {
			t.Fatalf("len %d: err %v", len(b), err)
		}
	})
}

// TestEventFDNoWait: a timeout of zero or less reads without waiting (a
// negative one must not reach poll(2), which would wait for ever), and a
// positive one ends in ErrTimeout.
func TestEventFDNoWait(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	fd := NewEventFD(int(r.Fd()))
	for _, timeout := range []time.Duration{-time.Second, 0, 20 * time.Millisecond} {
		done := make(chan error, 1)
		go func() { _, err := fd.CompEvent(timeout); done <- err }()
		select {
		case err := <-done:
			require.ErrorIs(t, err, ErrTimeout, "timeout %v", timeout)
		case <-time.After(5 * time.Second):
			t.Fatalf("timeout %v: still waiting after 5 s", timeout)
		}
	}
}
