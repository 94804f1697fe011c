package uverbs

import (
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIoctlNumber(t *testing.T) {
	require.EqualValues(t, 0xC0181B01, RDMAVerbsIoctl)
	require.EqualValues(t, RDMAVerbsIoctl, IOWR(RDMAIoctlMagic, 1, IoctlHdrSize))
}

func TestPutWriteHdr(t *testing.T) {
	cases := []struct {
		name         string
		buf          int
		body, out    int
		want         error
		in, outWords uint16
	}{
		{"create_cq_mlx5", 72, CreateCQSize + MLX5CreateCQSize, CreateCQRespSize + MLX5CreateCQRespSize, nil, 18, 4},
		{"dealloc_pd", 12, DeallocPDSize, 0, nil, 3, 0},
		{"body_not_words", 64, 6, 0, ErrBadLength, 0, 0},
		{"out_not_words", 64, 8, 6, ErrBadLength, 0, 0},
		{"buffer_short", 16, 16, 0, ErrShortBuffer, 0, 0},
		{"negative", 64, -8, 0, ErrBadLength, 0, 0},
		{"too_many_words", 1 << 20, 0x40000, 0, ErrBadLength, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := make([]byte, c.buf)
			n, err := PutWriteHdr(b, CmdCreateCQ, c.body, c.out)
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, CmdHdrSize+c.body, n)
			h := CmdHdr(b)
			require.Equal(t, c.in, h.InWords())
			require.Equal(t, c.outWords, h.OutWords())
			require.Equal(t, CmdCreateCQ, h.Cmd())
			require.False(t, h.Extended())
		})
	}
}

func TestParseWrite(t *testing.T) {
	// A good CREATE_CQ with mlx5 driver data: 8 + 32 + 32 bytes.
	good := make([]byte, 72)
	req := CreateCQ{Response: 0x7000, UserHandle: 9, CQE: 255, CompChannel: NoCompChannel}
	drv := MLX5CreateCQ{BufAddr: 0x10000, DBAddr: 0x20000, CQESize: 64}
	n, err := EncodeWrite(good, CmdCreateCQ, &req, &drv, CreateCQRespSize+MLX5CreateCQRespSize)
	require.NoError(t, err)
	require.Equal(t, 72, n)

	ex := make([]byte, 24+ExCreateCQSize)
	_, err = PutExWriteHdr(ex, ExCmdCreateCQ, ExCreateCQSize, 0, ExCreateCQRespSize, 0, 0x9000)
	require.NoError(t, err)

	mut := func(b []byte, f func([]byte)) []byte { c := append([]byte(nil), b...); f(c); return c }
	// exCmd is an extended command of core bytes, out bytes of response.
	exCmd := func(cmd Command, core, out int) []byte {
		b := make([]byte, 24+core)
		resp := uint64(0)
		if out > 0 {
			resp = 0x9000
		}
		_, err := PutExWriteHdr(b, cmd, core, 0, out, 0, resp)
		require.NoError(t, err)
		return b
	}
	cases := []struct {
		name  string
		in    []byte
		want  error
		errno syscall.Errno
		check func(t *testing.T, m WriteMsg)
	}{
		{"create_cq", good, nil, 0, func(t *testing.T, m WriteMsg) {
			require.Equal(t, CmdCreateCQ, m.Cmd)
			require.Len(t, m.Core, CreateCQSize)
			require.Len(t, m.Driver, MLX5CreateCQSize)
			require.EqualValues(t, 0x7000, m.Response)
			require.Equal(t, 16, m.OutLen)
			var d MLX5CreateCQ
			require.NoError(t, d.Decode(m.Driver))
			require.Equal(t, drv, d)
		}},
		{"ex_create_cq", ex, nil, 0, func(t *testing.T, m WriteMsg) {
			require.True(t, m.Extended)
			require.Equal(t, ExCmdCreateCQ, m.Cmd)
			require.Len(t, m.Core, ExCreateCQSize)
			require.Empty(t, m.Driver)
			require.EqualValues(t, 0x9000, m.Response)
			require.Equal(t, ExCreateCQRespSize, m.OutLen)
		}},
		{"empty", nil, ErrTruncated, syscall.EINVAL, nil},
		{"header_short", good[:4], ErrTruncated, syscall.EINVAL, nil},
		{"length_not_in_words", good[:68], ErrBadLength, syscall.EINVAL, nil},
		{"core_short", mut(good[:16], func(b []byte) { binary.NativeEndian.PutUint16(b[4:], 4) }), ErrTruncated, syscall.ENOSPC, nil},
		{"out_short", mut(good, func(b []byte) { binary.NativeEndian.PutUint16(b[6:], 1) }), ErrTruncated, syscall.ENOSPC, nil},
		{"command_high_bits", mut(good, func(b []byte) { b[2] = 1 }), ErrReserved, syscall.EINVAL, nil},
		{"unknown_command", mut(good, func(b []byte) { b[0] = 200 }), nil, 0, func(t *testing.T, m WriteMsg) {
			require.Len(t, m.Core, 64)
			require.Nil(t, m.Driver)
		}},
		{"ex_short", ex[:20], ErrTruncated, syscall.EINVAL, nil},
		{"ex_core_below_the_minimum", exCmd(ExCmdCreateCQ, 24, 16), ErrTruncated, syscall.ENOSPC, nil},
		{"ex_create_qp_up_to_comp_mask", exCmd(ExCmdCreateQP, 56, 40), nil, 0, func(t *testing.T, m WriteMsg) {
			require.Len(t, m.Core, 56)
		}},
		{"ex_create_qp_before_comp_mask", exCmd(ExCmdCreateQP, 48, 40), ErrTruncated, syscall.ENOSPC, nil},
		{"ex_out_below_the_response_length", exCmd(ExCmdCreateCQ, 32, 8), ErrTruncated, syscall.ENOSPC, nil},
		{"ex_query_device_out_of_the_base_only", exCmd(ExCmdQueryDevice, 8, QueryDeviceRespSize), ErrTruncated, syscall.ENOSPC, nil},
		{"ex_modify_qp_without_response", exCmd(ExCmdModifyQP, 120, 0), nil, 0, func(t *testing.T, m WriteMsg) {
			require.Zero(t, m.OutLen)
		}},
		{"ex_unknown_command_no_minimum", exCmd(57, 8, 8), nil, 0, func(t *testing.T, m WriteMsg) {
			require.Len(t, m.Core, 8)
		}},
		{"ex_reserved", mut(ex, func(b []byte) { b[20] = 1 }), ErrReserved, syscall.EINVAL, nil},
		{"ex_words", mut(ex, func(b []byte) { b[4] = 3 }), ErrBadLength, syscall.EINVAL, nil},
		{"ex_response_without_out", mut(ex, func(b []byte) { b[6] = 0 }), ErrBadLength, syscall.EINVAL, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := ParseWrite(c.in)
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
				require.ErrorIs(t, err, c.errno)
				return
			}
			require.NoError(t, err)
			c.check(t, m)
		})
	}
}

func TestPutExWriteHdrErrors(t *testing.T) {
	b := make([]byte, 128)
	_, err := PutExWriteHdr(b, ExCmdCreateQP, 60, 0, 40, 0, 1)
	require.ErrorIs(t, err, ErrBadLength)
	_, err = PutExWriteHdr(b, ExCmdCreateQP, 64, 0, 40, 0, 0)
	require.ErrorIs(t, err, ErrBadLength, "out words without a response address")
	_, err = PutExWriteHdr(b[:80], ExCmdCreateQP, 64, 0, 40, 0, 1)
	require.ErrorIs(t, err, ErrShortBuffer)
}

func TestIoctlBuildParse(t *testing.T) {
	b := make([]byte, 256)
	u := MLX5UARAlloc{Type: MLX5UARTypeNC, MmapOffset: 0x1000, MmapLength: 0x1008, PageID: 0x100c}
	r, err := u.Encode(b)
	require.NoError(t, err)
	require.Equal(t, 24+5*16, r.Len())
	h, err := ParseIoctl(r.Bytes())
	require.NoError(t, err)
	require.Equal(t, MLX5ObjectUAR, h.ObjectID())
	require.Equal(t, MLX5MethodUARObjAlloc, h.MethodID())
	require.Equal(t, DriverMLX5, h.DriverID())
	require.Equal(t, 5, h.NumAttrs())
	a, ok := h.FindAttr(MLX5AttrUARObjAllocType)
	require.True(t, ok)
	require.EqualValues(t, MLX5UARTypeNC, a.Data())
	require.Equal(t, 8, a.Len())
	a, ok = h.FindAttr(MLX5AttrUARObjAllocMmapLength)
	require.True(t, ok)
	require.Equal(t, 4, a.Len())
	require.EqualValues(t, 0x1008, a.Data())
	_, ok = h.FindAttr(AttrCoreIn)
	require.False(t, ok)

	mut := func(f func([]byte)) []byte { c := append([]byte(nil), r.Bytes()...); f(c); return c }
	cases := []struct {
		name  string
		in    []byte
		want  error
		errno syscall.Errno
	}{
		{"short", r.Bytes()[:10], ErrTruncated, syscall.ENOSPC},
		{"length_mismatch", mut(func(c []byte) { c[0] = 40 }), ErrBadLength, syscall.EINVAL},
		{"attrs_missing", r.Bytes()[:40], ErrTruncated, syscall.ENOSPC},
		{"reserved1", mut(func(c []byte) { c[9] = 1 }), ErrReserved, syscall.EPROTONOSUPPORT},
		{"reserved2", mut(func(c []byte) { c[23] = 1 }), ErrReserved, syscall.EPROTONOSUPPORT},
		{"duplicate_attr", mut(func(c []byte) { copy(c[24+16:24+18], c[24:26]) }), ErrBadAttr, syscall.EINVAL},
		{"enum_reserved", mut(func(c []byte) { c[24+7] = 1 }), ErrReserved, syscall.EINVAL},
		{"too_long", func() []byte {
			c := make([]byte, 4200)
			binary.NativeEndian.PutUint16(c[0:], 24+16*260)
			binary.NativeEndian.PutUint16(c[6:], 260)
			return c
		}(), ErrBadLength, syscall.EINVAL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseIoctl(c.in)
			require.ErrorIs(t, err, c.want)
			require.ErrorIs(t, err, c.errno)
		})
	}
}

func TestIoctlLimits(t *testing.T) {
	r, err := NewIoctl(make([]byte, 24+16), ObjectDevice, MethodGetContext, DriverRXE)
	require.NoError(t, err)
	require.NoError(t, r.Add(AttrPtrOut(AttrGetContextNumCompVectors, 0x10, 4)))
	require.ErrorIs(t, r.Add(AttrPtrOut(AttrGetContextCoreSupport, 0x18, 8)), ErrShortBuffer)
	_, err = NewIoctl(make([]byte, 23), ObjectDevice, MethodGetContext, DriverRXE)
	require.ErrorIs(t, err, ErrShortBuffer)
	var zero Ioctl
	require.ErrorIs(t, zero.Add(AttrFields{}), ErrShortBuffer)
	_, err = AttrInline(AttrCoreIn, make([]byte, 9))
	require.ErrorIs(t, err, ErrBadAttr)
	big, err := NewIoctl(make([]byte, 8192), ObjectDevice, MethodGetContext, DriverRXE)
	require.NoError(t, err)
	for i := 0; i < MaxIoctlAttrs; i++ {
		require.NoError(t, big.Add(AttrIDR(AttrID(i), 1)))
	}
	require.ErrorIs(t, big.Add(AttrIDR(0xfff, 1)), ErrBadLength)
	require.LessOrEqual(t, big.Len(), MaxIoctlLen)
}

func TestInvokeWrite(t *testing.T) {
	core := make([]byte, 8) // ALLOC_PD core: just the (ignored) response pointer
	w := InvokeWrite{Cmd: CmdAllocPD, CoreInLen: 8, CoreInline: core, CoreOut: 0x5000, CoreOutLen: 4, UHWOut: 0x6000, UHWOutLen: 4}
	r, err := w.Encode(make([]byte, 256), DriverMLX5)
	require.NoError(t, err)
	h, err := ParseIoctl(r.Bytes())
	require.NoError(t, err)
	require.Equal(t, ObjectDevice, h.ObjectID())
	require.Equal(t, MethodInvokeWrite, h.MethodID())
	require.Equal(t, 4, h.NumAttrs())
	wc := h.Attr(0)
	require.Equal(t, AttrWriteCmd, wc.ID())
	require.EqualValues(t, CmdAllocPD, wc.Data())
	in, ok := h.Attr(1).Inline()
	require.True(t, ok)
	require.Equal(t, core, in)
	require.Equal(t, AttrUHWOut, h.Attr(3).ID())
	require.EqualValues(t, AttrFMandatory, h.Attr(3).Flags())
	w.CoreInline = nil
	_, err = w.Encode(make([]byte, 256), DriverMLX5)
	require.ErrorIs(t, err, ErrBadAttr)
}

func TestFramingAllocs(t *testing.T) {
	b := make([]byte, 256)
	req := CreateCQ{CQE: 63, CompChannel: NoCompChannel}
	drv := MLX5CreateCQ{CQESize: 64}
	u := MLX5UARAlloc{Type: MLX5UARTypeBF}
	require.Zero(t, testing.AllocsPerRun(100, func() {
		n, _ := PutWriteHdr(b, CmdCreateCQ, CreateCQSize+MLX5CreateCQSize, 16)
		_, _ = req.Encode(b[CmdHdrSize:])
		_, _ = drv.Encode(b[CmdHdrSize+CreateCQSize:])
		_, _ = ParseWrite(b[:n])
		r, _ := u.Encode(b)
		_, _ = ParseIoctl(r.Bytes())
		_, _ = RXEDoorbell(b, 3, 0x1000)
	}))
	_, err := RXEDoorbell(b[:31], 3, 0x1000)
	require.ErrorIs(t, err, ErrShortBuffer)
}

func TestIoctlMethods(t *testing.T) {
	b := make([]byte, 256)
	cases := []struct {
		name   string
		build  func() (Ioctl, error)
		obj    ObjectID
		method MethodID
		attrs  []AttrID
	}{
		{"get_context_no_uhw", func() (Ioctl, error) {
			g := GetContextIoctl{NumCompVectors: 8, CoreSupport: 16}
			return g.Encode(b, DriverRXE)
		}, ObjectDevice, MethodGetContext, []AttrID{AttrGetContextNumCompVectors, AttrGetContextCoreSupport}},
		{"query_port", func() (Ioctl, error) { return QueryPortIoctl(b, 1, 0x100, DriverRXE) },
			ObjectDevice, MethodQueryPort, []AttrID{AttrQueryPortPortNum, AttrQueryPortResp}},
		{"destroy_pd", func() (Ioctl, error) { return Destroy(b, ObjectPD, 1, 0, DriverMLX5) },
			ObjectPD, MethodPDDestroy, []AttrID{AttrDestroyPDHandle}},
		{"destroy_qp", func() (Ioctl, error) { return Destroy(b, ObjectQP, 1, 0x10, DriverMLX5) },
			ObjectQP, MethodQPDestroy, []AttrID{AttrDestroyQPHandle, AttrDestroyQPResp}},
		{"destroy_uar", func() (Ioctl, error) { return Destroy(b, MLX5ObjectUAR, 1, 0, DriverMLX5) },
			MLX5ObjectUAR, MLX5MethodUARObjDestroy, []AttrID{MLX5AttrUARObjDestroyHandle}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := c.build()
			require.NoError(t, err)
			h, err := ParseIoctl(r.Bytes())
			require.NoError(t, err)
			require.Equal(t, c.obj, h.ObjectID())
			require.Equal(t, c.method, h.MethodID())
			require.Equal(t, len(c.attrs), h.NumAttrs())
			for i, id := range c.attrs {
				require.Equal(t, id, h.Attr(i).ID())
			}
		})
	}
	_, err := Destroy(b, objectFlowForTest, 1, 0, DriverMLX5)
	require.ErrorIs(t, err, ErrBadValue)
	_, err = AsyncEventAlloc(b[:10], DriverRXE)
	require.ErrorIs(t, err, ErrShortBuffer)
}

// objectFlowForTest is UVERBS_OBJECT_FLOW, which Destroy does not know.
const objectFlowForTest ObjectID = 9

// TestViewOffsets: the byte views (CmdHdr, ExCmdHdr, IoctlHdr, Attr) keep
// their own offset constants for speed; they must be the generated
// layouts' (which test/uverbslayout checks against the uapi headers).
func TestViewOffsets(t *testing.T) {
	views := map[string]map[string]int{
		"ib_uverbs_cmd_hdr": {"command": cmdHdrCommand, "in_words": cmdHdrInWords, "out_words": cmdHdrOutWords},
		"ib_uverbs_ex_cmd_hdr": {"response": exHdrResponse, "provider_in_words": exHdrProvIn,
			"provider_out_words": exHdrProvOut, "cmd_hdr_reserved": exHdrReserved},
		"ib_uverbs_ioctl_hdr": {"length": ioLength, "object_id": ioObject, "method_id": ioMethod, "num_attrs": ioNumAttrs,
			"reserved1": ioReserved1, "driver_id": ioDriverID, "reserved2": ioReserved2},
		"ib_uverbs_attr": {"attr_id": attrID, "len": attrLen, "flags": attrFlags, "attr_data.enum_data.elem_id": attrElemID,
			"attr_data.enum_data.reserved": attrRsv, "data": attrData},
	}
	seen := 0
	for _, l := range Layouts() {
		v, ok := views[l.C]
		if !ok {
			continue
		}
		seen++
		require.Len(t, v, len(l.Members), l.C)
		for _, m := range l.Members {
			off, ok := v[m.C]
			require.True(t, ok, "%s.%s has no view offset", l.C, m.C)
			require.Equal(t, m.Offset, off, "%s.%s", l.C, m.C)
		}
	}
	require.Equal(t, len(views), seen)
}
