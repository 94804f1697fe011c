package uverbsdev

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/softnic/softnic/uverbs"
)

// ioctlReq is one ioctl being served: the request's attributes and the
// response buffer whose head is the attribute array as the kernel
// leaves it.
type ioctlReq struct {
	name string
	in   uverbs.IoctlHdr // the request
	out  uverbs.IoctlHdr // its copy at the head of the response
	resp []byte
	n    int // response bytes used
}

func (r *ioctlReq) find(id uverbs.AttrID) (int, bool) {
	for i := 0; i < r.in.NumAttrs(); i++ {
		if r.in.Attr(i).ID() == id {
			return i, true
		}
	}
	return 0, false
}

// check refuses attributes the method does not know: a mandatory one is
// EPROTONOSUPPORT, as in the kernel; optional ones are ignored.
func (r *ioctlReq) check(known ...uverbs.AttrID) *uverbs.Error {
outer:
	for i := 0; i < r.in.NumAttrs(); i++ {
		a := r.in.Attr(i)
		for _, k := range known {
			if a.ID() == k {
				continue outer
			}
		}
		if a.Flags()&uverbs.AttrFMandatory != 0 {
			return fail(r.name, syscall.EPROTONOSUPPORT, fmt.Sprintf("unknown mandatory attribute %#x", a.ID()))
		}
	}
	return nil
}

func (r *ioctlReq) need(id uverbs.AttrID) (uverbs.Attr, int, *uverbs.Error) {
	i, ok := r.find(id)
	if !ok {
		return nil, 0, fail(r.name, syscall.EINVAL, fmt.Sprintf("missing attribute %#x", id))
	}
	a := r.in.Attr(i)
	if a.ElemID() != 0 {
		// uverbs_process_attr: attr_data is an enum's element only for
		// ENUM_IN, which no method served here has; for PTR_IN/OUT, IDR
		// and FD attributes it must be zero.
		return nil, 0, fail(r.name, syscall.EINVAL, fmt.Sprintf("attribute %#x: attr_data %#x on an attribute that is no enum", id, a.ElemID()))
	}
	return a, i, nil
}

// inline reads a value carried in the data word (len 1..8).
func (r *ioctlReq) inline(id uverbs.AttrID, width int) (uint64, *uverbs.Error) {
	a, _, e := r.need(id)
	if e != nil {
		return 0, e
	}
	if a.Len() != width {
		return 0, fail(r.name, syscall.EINVAL, fmt.Sprintf("attribute %#x of %d bytes, want %d", id, a.Len(), width))
	}
	v := a.Data()
	if width < 8 {
		v &= 1<<(8*width) - 1
	}
	return v, nil
}

func (r *ioctlReq) handle(id uverbs.AttrID) (uverbs.Handle, int, *uverbs.Error) {
	a, i, e := r.need(id)
	if e != nil {
		return 0, 0, e
	}
	if a.Len() != 0 || a.Data() > 1<<32-1 {
		return 0, 0, fail(r.name, syscall.EINVAL, fmt.Sprintf("IDR attribute %#x: len %d data %#x", id, a.Len(), a.Data()))
	}
	return uverbs.Handle(a.Data()), i, nil
}

// output returns where a PTR_OUT of want bytes goes: a.Data() is its
// offset in the response buffer (after the attribute array). The
// attribute must be want bytes long: every output served here is a
// UVERBS_ATTR_TYPE or a UVERBS_ATTR_STRUCT ending at its last member, so
// min_len = len = want, and uverbs_process_attr refuses a shorter or a
// longer PTR_OUT with EINVAL. The range must lie inside the buffer (EFAULT).
func (r *ioctlReq) output(id uverbs.AttrID, want int) ([]byte, *uverbs.Error) {
	a, i, e := r.need(id)
	if e != nil {
		return nil, e
	}
	off, hdr := a.Data(), uint64(len(r.out))
	switch {
	case a.Len() != want:
		return nil, fail(r.name, syscall.EINVAL, fmt.Sprintf("output attribute %#x of %d bytes, the method writes %d", id, a.Len(), want))
	case off < hdr || off > uint64(len(r.resp)) || uint64(len(r.resp))-off < uint64(want):
		return nil, fail(r.name, syscall.EFAULT, fmt.Sprintf("output attribute %#x at %#x+%d is outside the response buffer [%d,%d)", id, off, want, hdr, len(r.resp)))
	}
	oa := r.out.Attr(i)
	oa.SetFlags(oa.Flags() | uverbs.AttrFValidOutput)
	r.n = max(r.n, int(off)+want)
	return r.resp[off : off+uint64(want)], nil
}

var ioctlNames = map[[2]uint16]string{
	{uint16(uverbs.MLX5ObjectUAR), uint16(uverbs.MLX5MethodUARObjAlloc)}:   "MLX5_IB_METHOD_UAR_OBJ_ALLOC",
	{uint16(uverbs.MLX5ObjectUAR), uint16(uverbs.MLX5MethodUARObjDestroy)}: "MLX5_IB_METHOD_UAR_OBJ_DESTROY",
	{uint16(uverbs.ObjectDevice), uint16(uverbs.MethodQueryGIDEntry)}:      "UVERBS_METHOD_QUERY_GID_ENTRY",
	{uint16(uverbs.ObjectPD), uint16(uverbs.MethodPDDestroy)}:              "UVERBS_METHOD_PD_DESTROY",
	{uint16(uverbs.ObjectCQ), uint16(uverbs.MethodCQDestroy)}:              "UVERBS_METHOD_CQ_DESTROY",
	{uint16(uverbs.ObjectQP), uint16(uverbs.MethodQPDestroy)}:              "UVERBS_METHOD_QP_DESTROY",
	{uint16(uverbs.ObjectSRQ), uint16(uverbs.MethodSRQDestroy)}:            "UVERBS_METHOD_SRQ_DESTROY",
	{uint16(uverbs.ObjectAH), uint16(uverbs.MethodAHDestroy)}:              "UVERBS_METHOD_AH_DESTROY",
	{uint16(uverbs.ObjectMR), uint16(uverbs.MethodMRDestroy)}:              "UVERBS_METHOD_DM_MR_DESTROY",
}

// ioctlName names h's method, and reports whether the device serves it.
func ioctlName(h uverbs.IoctlHdr) (string, bool) {
	if n, ok := ioctlNames[[2]uint16{uint16(h.ObjectID()), uint16(h.MethodID())}]; ok {
		return n, true
	}
	return fmt.Sprintf("IOCTL_%#x_%#x", uint16(h.ObjectID()), uint16(h.MethodID())), false
}

// ioctl serves one RDMA_VERBS_IOCTL request.
func (s *Server) ioctl(req, resp []byte) (int, *uverbs.Error) {
	h, err := uverbs.ParseIoctl(req)
	if err != nil {
		return 0, refusal("RDMA_VERBS_IOCTL", err)
	}
	name, served := ioctlName(h)
	// ib_uverbs_cmd_verbs' order: the driver id, then the method, before
	// anything needs a user context. rdma-core probes INVOKE_WRITE and
	// sends GET_CONTEXT as an ioctl before it has a context, and falls
	// back to write() only on EPROTONOSUPPORT.
	switch {
	case s.closed:
		return 0, fail(name, syscall.EIO, "context closed")
	case h.DriverID() != uverbs.DriverMLX5:
		return 0, fail(name, syscall.EINVAL, fmt.Sprintf("driver_id %d (the device is mlx5, %d)", h.DriverID(), uverbs.DriverMLX5))
	case !served:
		return 0, fail(name, syscall.EPROTONOSUPPORT, "method not served by this device")
	case !s.open:
		return 0, fail(name, syscall.EINVAL, "no user context: GET_CONTEXT first")
	case len(resp) < len(h):
		return 0, fail(name, syscall.EFAULT, fmt.Sprintf("response buffer of %d bytes cannot hold the %d-byte attribute array", len(resp), len(h)))
	}
	copy(resp, h)
	r := &ioctlReq{name: name, in: h, out: uverbs.IoctlHdr(resp[:len(h)]), resp: resp, n: len(h)}
	var e *uverbs.Error
	switch [2]uint16{uint16(h.ObjectID()), uint16(h.MethodID())} {
	case [2]uint16{uint16(uverbs.MLX5ObjectUAR), uint16(uverbs.MLX5MethodUARObjAlloc)}:
		e = s.uarAlloc(r)
	case [2]uint16{uint16(uverbs.MLX5ObjectUAR), uint16(uverbs.MLX5MethodUARObjDestroy)}:
		e = s.uarDestroy(r)
	case [2]uint16{uint16(uverbs.ObjectDevice), uint16(uverbs.MethodQueryGIDEntry)}:
		e = s.queryGIDEntry(r)
	case [2]uint16{uint16(uverbs.ObjectPD), uint16(uverbs.MethodPDDestroy)}:
		e = s.destroyByIoctl(r, uverbs.AttrDestroyPDHandle, 0, 0, kindPD)
	case [2]uint16{uint16(uverbs.ObjectMR), uint16(uverbs.MethodMRDestroy)}:
		e = s.destroyByIoctl(r, uverbs.AttrDestroyMRHandle, 0, 0, kindMR)
	case [2]uint16{uint16(uverbs.ObjectAH), uint16(uverbs.MethodAHDestroy)}:
		e = s.destroyByIoctl(r, uverbs.AttrDestroyAHHandle, 0, 0, kindAH)
	case [2]uint16{uint16(uverbs.ObjectCQ), uint16(uverbs.MethodCQDestroy)}:
		e = s.destroyByIoctl(r, uverbs.AttrDestroyCQHandle, uverbs.AttrDestroyCQResp, uverbs.DestroyCQRespSize, kindCQ)
	case [2]uint16{uint16(uverbs.ObjectQP), uint16(uverbs.MethodQPDestroy)}:
		e = s.destroyByIoctl(r, uverbs.AttrDestroyQPHandle, uverbs.AttrDestroyQPResp, uverbs.DestroyQPRespSize, kindQP)
	case [2]uint16{uint16(uverbs.ObjectSRQ), uint16(uverbs.MethodSRQDestroy)}:
		e = s.destroyByIoctl(r, uverbs.AttrDestroySRQHandle, uverbs.AttrDestroySRQResp, uverbs.DestroySRQRespSize, kindSRQ)
	default: // not reached: ioctlNames lists every method served
		e = fail(name, syscall.EPROTONOSUPPORT, "method not served by this device")
	}
	if e != nil {
		return 0, e
	}
	return r.n, nil
}

// destroyByIoctl serves <object>/DESTROY: the handle attribute, and an
// optional response (event counts, all zero here: events are read
// elsewhere).
func (s *Server) destroyByIoctl(r *ioctlReq, hid, rid uverbs.AttrID, rlen int, k kind) *uverbs.Error {
	known := []uverbs.AttrID{hid}
	if rlen > 0 {
		known = append(known, rid)
	}
	if e := r.check(known...); e != nil {
		return e
	}
	h, _, e := r.handle(hid)
	if e != nil {
		return e
	}
	var out []byte
	if rlen > 0 {
		if _, ok := r.find(rid); ok {
			if out, e = r.output(rid, rlen); e != nil {
				return e
			}
		}
	}
	if e := s.destroyObj(r.name, h, k); e != nil {
		return e
	}
	clear(out)
	return nil
}

// ownsUAR reports whether the client allocated UAR page p.
func (s *Server) ownsUAR(p uint32) bool {
	i := int64(p) - int64(s.uctx.UARIndex)
	return i >= 0 && i < int64(len(s.uars)) && s.uars[i]
}

// uarAlloc is MLX5_IB_METHOD_UAR_OBJ_ALLOC: the lowest free UAR page of the
// context. Its page id is the UAR index CREATE_CQ's uar_page_index and
// CREATE_QP's bfreg_index (with MLX5_QP_FLAG_UAR_PAGE_INDEX) name; the
// mmap offset is the page's BAR0 offset, one page long.
func (s *Server) uarAlloc(r *ioctlReq) *uverbs.Error {
	if e := r.check(uverbs.MLX5AttrUARObjAllocHandle, uverbs.MLX5AttrUARObjAllocType, uverbs.MLX5AttrUARObjAllocMmapOffset,
		uverbs.MLX5AttrUARObjAllocMmapLength, uverbs.MLX5AttrUARObjAllocPageID); e != nil {
		return e
	}
	_, hi, e := r.handle(uverbs.MLX5AttrUARObjAllocHandle)
	if e != nil {
		return e
	}
	typ, e := r.inline(uverbs.MLX5AttrUARObjAllocType, 8)
	if e != nil {
		return e
	}
	if typ != uint64(uverbs.MLX5UARTypeBF) && typ != uint64(uverbs.MLX5UARTypeNC) {
		return fail(r.name, syscall.EINVAL, fmt.Sprintf("UAR type %d", typ))
	}
	off, e := r.output(uverbs.MLX5AttrUARObjAllocMmapOffset, 8)
	if e != nil {
		return e
	}
	ln, e := r.output(uverbs.MLX5AttrUARObjAllocMmapLength, 4)
	if e != nil {
		return e
	}
	pid, e := r.output(uverbs.MLX5AttrUARObjAllocPageID, 4)
	if e != nil {
		return e
	}
	i := 0
	for i < len(s.uars) && s.uars[i] {
		i++
	}
	if i == len(s.uars) {
		return fail(r.name, syscall.ENOMEM, fmt.Sprintf("all %d UAR pages of the context are allocated", len(s.uars)))
	}
	s.uars[i] = true
	page := s.uctx.UARIndex + uint32(i)
	h := s.add(&object{kind: kindUAR, num: page})
	r.out.Attr(hi).SetData(uint64(h))
	binary.NativeEndian.PutUint64(off, uint64(page)*4096)
	binary.NativeEndian.PutUint32(ln, 4096)
	binary.NativeEndian.PutUint32(pid, page)
	return nil
}

func (s *Server) uarDestroy(r *ioctlReq) *uverbs.Error {
	if e := r.check(uverbs.MLX5AttrUARObjDestroyHandle); e != nil {
		return e
	}
	h, _, e := r.handle(uverbs.MLX5AttrUARObjDestroyHandle)
	if e != nil {
		return e
	}
	o, e := s.lookupName(r.name, h, kindUAR)
	if e != nil {
		return e
	}
	s.release(o)
	return nil
}

// queryGIDEntry is UVERBS_METHOD_QUERY_GID_ENTRY: one entry of the port's
// GID table (every entry is RoCE v2).
func (s *Server) queryGIDEntry(r *ioctlReq) *uverbs.Error {
	if e := r.check(uverbs.AttrQueryGIDEntryPort, uverbs.AttrQueryGIDEntryGIDIndex, uverbs.AttrQueryGIDEntryFlags, uverbs.AttrQueryGIDEntryRespEntry); e != nil {
		return e
	}
	// CONST_IN attributes are u64-sized whatever their enum type, as in
	// the kernel (UVERBS_ATTR_CONST_IN).
	port, e := r.inline(uverbs.AttrQueryGIDEntryPort, 8)
	if e != nil {
		return e
	}
	idx, e := r.inline(uverbs.AttrQueryGIDEntryGIDIndex, 8)
	if e != nil {
		return e
	}
	if _, ok := r.find(uverbs.AttrQueryGIDEntryFlags); ok {
		fl, e := r.inline(uverbs.AttrQueryGIDEntryFlags, 4)
		if e != nil {
			return e
		}
		if fl != 0 {
			return fail(r.name, syscall.EINVAL, fmt.Sprintf("flags %#x", fl))
		}
	}
	out, e := r.output(uverbs.AttrQueryGIDEntryRespEntry, uverbs.GIDEntrySize)
	if e != nil {
		return e
	}
	a, err := s.dev.QueryPort(int(port))
	if err != nil {
		return refusal(r.name, err)
	}
	if idx >= uint64(len(a.GIDs)) {
		return fail(r.name, syscall.EINVAL, fmt.Sprintf("GID index %d (the table has %d)", idx, len(a.GIDs)))
	}
	g := uverbs.GIDEntry{GID: a.GIDs[idx], GIDIndex: uint32(idx), PortNum: uint32(port), GIDType: uverbs.GIDTypeRoCEv2}
	g.Encode(out) // out is GIDEntrySize bytes: cannot fail
	return nil
}
