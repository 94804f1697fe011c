package kverbs

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/softnic/softnic/uverbs"
)

// Requests and responses travel through buffers of the Dev, never the
// caller's: the kernel is given addresses inside them only (uverbs.md §6,
// "pointers stored inside buffers"), which are heap memory that neither
// moves nor is freed while the Dev lives.
const (
	maxReq  = 4096 // an ioctl is at most a page (uverbs_ioctl.c)
	maxResp = 4096
)

// RDMAVerbsIoctl is _IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr).
const RDMAVerbsIoctl = 3<<30 | uverbs.IoctlHdrSize<<16 | 0x1b<<8 | 1

// form is what prepare made of a request.
type form struct {
	ioctl   bool
	name    string // command or method name, for errors
	outLen  int    // bytes of response the kernel may write (write form)
	hdrLen  int    // ioctl: header + attributes
	outs    []out  // ioctl: PTR_OUT attributes rewritten
	respEnd int    // ioctl: end of the furthest output in resp
}

// out is one PTR_OUT attribute: its index and the nominal offset it had.
type out struct {
	i   int
	off uint64
}

// ptrOuts are the PTR_OUT attributes of the methods UverbsControl sends
// as ioctls (their data words are nominal offsets into the response).
var ptrOuts = map[[2]uint16][]uverbs.AttrID{
	{uint16(uverbs.ObjectDevice), uint16(uverbs.MethodInvokeWrite)}:         {uverbs.AttrCoreOut, uverbs.AttrUHWOut},
	{uint16(uverbs.ObjectDevice), uint16(uverbs.MethodGetContext)}:          {uverbs.AttrGetContextNumCompVectors, uverbs.AttrGetContextCoreSupport, uverbs.AttrUHWOut},
	{uint16(uverbs.ObjectDevice), uint16(uverbs.MethodQueryPort)}:           {uverbs.AttrQueryPortResp},
	{uint16(uverbs.ObjectDevice), uint16(uverbs.MethodQueryGIDEntry)}:       {uverbs.AttrQueryGIDEntryRespEntry},
	{uint16(uverbs.ObjectCQ), uint16(uverbs.MethodCQDestroy)}:               {uverbs.AttrDestroyCQResp},
	{uint16(uverbs.ObjectQP), uint16(uverbs.MethodQPDestroy)}:               {uverbs.AttrDestroyQPResp},
	{uint16(uverbs.ObjectSRQ), uint16(uverbs.MethodSRQDestroy)}:             {uverbs.AttrDestroySRQResp},
	{uint16(uverbs.ObjectAsyncEvent), uint16(uverbs.MethodAsyncEventAlloc)}: {},
	{uint16(uverbs.ObjectPD), uint16(uverbs.MethodPDDestroy)}:               {},
	{uint16(uverbs.ObjectMR), uint16(uverbs.MethodMRDestroy)}:               {},
	{uint16(uverbs.ObjectAH), uint16(uverbs.MethodAHDestroy)}:               {},
	{uint16(uverbs.MLX5ObjectUAR), uint16(uverbs.MLX5MethodUARObjAlloc)}: {uverbs.MLX5AttrUARObjAllocMmapOffset,
		uverbs.MLX5AttrUARObjAllocMmapOffset + 1, uverbs.MLX5AttrUARObjAllocMmapOffset + 2},
	{uint16(uverbs.MLX5ObjectUAR), uint16(uverbs.MLX5MethodUARObjDestroy)}: {},
}

func localErr(name string, errno syscall.Errno, format string, args ...any) error {
	return &uverbs.Error{Cmd: name, Errno: errno, Reason: "kverbs: " + fmt.Sprintf(format, args...)}
}

func ioctlName(obj, method uint16) string {
	return fmt.Sprintf("ioctl(object %#x, method %#x)", obj, method)
}

// prepare copies req into dst and turns its nominal response addresses
// into addresses in the response buffer at base of respLen bytes: the
// write() response word (legacy: the first u64 of the body; extended:
// ex_hdr.response) or each PTR_OUT attribute's data (an offset into the
// response, after the attribute array). It also stamps an ioctl with the
// device's driver id. It never panics and never names memory outside
// [base, base+respLen); anything it cannot vouch for is an error, as the
// kernel would give it (EINVAL, EFAULT, EPROTONOSUPPORT).
func prepare(dst, req []byte, respLen int, base uint64, drv uverbs.DriverID) (form, error) {
	if len(req) > len(dst) {
		return form{}, localErr("uverbs", syscall.EINVAL, "request of %d bytes (at most %d)", len(req), len(dst))
	}
	if respLen < 0 || respLen > maxResp {
		return form{}, localErr("uverbs", syscall.EINVAL, "response buffer of %d bytes (at most %d)", respLen, maxResp)
	}
	copy(dst, req)
	b := dst[:len(req)]
	if uverbs.IsIoctl(b) {
		return prepareIoctl(b, respLen, base, drv)
	}
	return prepareWrite(b, respLen, base)
}

func prepareWrite(b []byte, respLen int, base uint64) (form, error) {
	if len(b) < uverbs.CmdHdrSize {
		return form{}, localErr("write", syscall.EINVAL, "%d bytes: no ib_uverbs_cmd_hdr", len(b))
	}
	h := uverbs.CmdHdr(b)
	f := form{name: h.Cmd().String()}
	if h.Command()&^(uverbs.CmdFlagExtended|uverbs.CmdCommandMask) != 0 {
		return f, localErr(f.name, syscall.EINVAL, "command word %#x", h.Command())
	}
	if !h.Extended() {
		if int(h.InWords())*4 != len(b) {
			return f, localErr(f.name, syscall.EINVAL, "in_words %d for a %d-byte write", h.InWords(), len(b))
		}
		f.outLen = int(h.OutWords()) * 4
		if _, resp, ok := uverbs.CoreSizes(h.Cmd(), false); ok && resp == 0 {
			// No response (DEALLOC_PD, MODIFY_QP, ...): the kernel's
			// has_resp is false, out_words is ignored, and the body's
			// first u64 is request data (MODIFY_QP's dgid), not an
			// address to rewrite.
			f.outLen = 0
		}
		if f.outLen == 0 {
			return f, nil
		}
		if len(b) < uverbs.CmdHdrSize+8 {
			return f, localErr(f.name, syscall.EINVAL, "out_words %d but no response word", h.OutWords())
		}
		if f.outLen > respLen {
			return f, localErr(f.name, syscall.EFAULT, "response of %d bytes, buffer %d", f.outLen, respLen)
		}
		binary.NativeEndian.PutUint64(b[uverbs.CmdHdrSize:], base)
		return f, nil
	}
	f.name = "EX_" + f.name
	if len(b) < uverbs.CmdHdrSize+uverbs.ExCmdHdrSize {
		return f, localErr(f.name, syscall.EINVAL, "%d bytes: no ib_uverbs_ex_cmd_hdr", len(b))
	}
	x := uverbs.ExCmdHdr(b[uverbs.CmdHdrSize:])
	if want := uverbs.CmdHdrSize + uverbs.ExCmdHdrSize + (int(h.InWords())+int(x.ProviderInWords()))*8; want != len(b) {
		return f, localErr(f.name, syscall.EINVAL, "in words say %d bytes, write of %d", want, len(b))
	}
	f.outLen = (int(h.OutWords()) + int(x.ProviderOutWords())) * 8
	if f.outLen == 0 {
		if x.Response() != 0 {
			return f, localErr(f.name, syscall.EINVAL, "response address without out words")
		}
		return f, nil
	}
	if f.outLen > respLen {
		return f, localErr(f.name, syscall.EFAULT, "response of %d bytes, buffer %d", f.outLen, respLen)
	}
	binary.NativeEndian.PutUint64(b[uverbs.CmdHdrSize:], base)
	return f, nil
}

func prepareIoctl(b []byte, respLen int, base uint64, drv uverbs.DriverID) (form, error) {
	h, err := uverbs.ParseIoctl(b)
	if err != nil {
		return form{}, fmt.Errorf("kverbs: ioctl: %w", err)
	}
	obj, meth := uint16(h.ObjectID()), uint16(h.MethodID())
	f := form{ioctl: true, name: ioctlName(obj, meth), hdrLen: len(h)}
	outs, known := ptrOuts[[2]uint16{obj, meth}]
	if !known {
		return f, localErr(f.name, syscall.EPROTONOSUPPORT, "method not known to the kernel transport")
	}
	if len(h) > respLen {
		return f, localErr(f.name, syscall.EFAULT, "response buffer of %d bytes cannot hold the %d-byte attribute array", respLen, len(h))
	}
	binary.NativeEndian.PutUint32(b[16:], uint32(drv))
	f.respEnd = len(h)
	for i := 0; i < h.NumAttrs(); i++ {
		a := h.Attr(i)
		isOut := false
		for _, id := range outs {
			if a.ID() == id {
				isOut = true
			}
		}
		if !isOut {
			continue
		}
		off, n := a.Data(), uint64(a.Len())
		if n == 0 || off < uint64(len(h)) || off > uint64(respLen) || n > uint64(respLen)-off {
			return f, localErr(f.name, syscall.EFAULT, "attribute %#x: %d bytes at offset %d of a %d-byte response", a.ID(), n, off, respLen)
		}
		a.SetData(base + off)
		f.outs = append(f.outs, out{i: i, off: off})
		f.respEnd = max(f.respEnd, int(off+n))
	}
	return f, nil
}

// finishIoctl copies the attribute array as the kernel left it (new
// handles, fds, VALID_OUTPUT flags) to the head of resp, with the PTR_OUT
// data words back to their nominal offsets.
func finishIoctl(f form, kernelHdr, resp []byte) {
	copy(resp, kernelHdr[:f.hdrLen])
	h := uverbs.IoctlHdr(resp[:f.hdrLen])
	for _, o := range f.outs {
		h.Attr(o.i).SetData(o.off)
	}
}
