package uverbs

import "syscall"

// GetContextIoctl is DEVICE/GET_CONTEXT in the ioctl form rdma-core 44
// uses first (uverbs.md §2.4): the kernel writes the number of completion
// vectors (u32) and CORE_SUPPORT (u64) at the two addresses, and the
// driver data travels as UHW_IN/UHW_OUT. It creates no async fd: follow it
// with AsyncEventAlloc.
type GetContextIoctl struct {
	NumCompVectors, CoreSupport uint64 // user addresses of the outputs
	UHWIn                       uint64
	UHWInLen                    int
	UHWOut                      uint64
	UHWOutLen                   int
}

// Encode builds the request in b.
func (g *GetContextIoctl) Encode(b []byte, driverID DriverID) (Ioctl, error) {
	r, err := NewIoctl(b, ObjectDevice, MethodGetContext, driverID)
	if err != nil {
		return r, err
	}
	attrs := [...]AttrFields{
		AttrPtrOut(AttrGetContextNumCompVectors, g.NumCompVectors, 4),
		AttrPtrOut(AttrGetContextCoreSupport, g.CoreSupport, 8),
		AttrPtrIn(AttrUHWIn, g.UHWIn, g.UHWInLen),
		AttrPtrOut(AttrUHWOut, g.UHWOut, g.UHWOutLen),
	}
	for i, a := range attrs {
		if i >= 2 && a.Len == 0 {
			continue
		}
		if err := r.Add(a); err != nil {
			return r, err
		}
	}
	return r, nil
}

// AsyncEventAlloc builds ASYNC_EVENT/ALLOC in b: one FD_OUT attribute,
// whose data the kernel sets to the new async event fd.
func AsyncEventAlloc(b []byte, driverID DriverID) (Ioctl, error) {
	r, err := NewIoctl(b, ObjectAsyncEvent, MethodAsyncEventAlloc, driverID)
	if err != nil {
		return r, err
	}
	return r, r.Add(AttrFDOut(AttrAsyncEventAllocFDHandle))
}

// QueryPortIoctl builds DEVICE/QUERY_PORT in b: the port number inline and
// a 48-byte ib_uverbs_query_port_resp_ex written at resp.
func QueryPortIoctl(b []byte, port uint8, resp uint64, driverID DriverID) (Ioctl, error) {
	r, err := NewIoctl(b, ObjectDevice, MethodQueryPort, driverID)
	if err != nil {
		return r, err
	}
	if err := r.Add(AttrConstIn(AttrQueryPortPortNum, uint64(port))); err != nil {
		return r, err
	}
	return r, r.Add(AttrPtrOut(AttrQueryPortResp, resp, QueryPortRespExSize))
}

// QueryGIDEntryIoctl builds DEVICE/QUERY_GID_ENTRY in b: the port and GID
// index as CONST_IN (8 bytes inline: the kernel's UVERBS_ATTR_CONST_IN of
// a u32 is sized as a u64, and a 4-byte one is EINVAL), flags 0 (a u32
// FLAGS_IN), and a GIDEntrySize-byte ib_uverbs_gid_entry written at resp.
func QueryGIDEntryIoctl(b []byte, port, index uint32, resp uint64, driverID DriverID) (Ioctl, error) {
	r, err := NewIoctl(b, ObjectDevice, MethodQueryGIDEntry, driverID)
	for _, a := range [...]AttrFields{AttrConstIn(AttrQueryGIDEntryPort, uint64(port)), AttrConstIn(AttrQueryGIDEntryGIDIndex, uint64(index)),
		AttrU32In(AttrQueryGIDEntryFlags, 0), AttrPtrOut(AttrQueryGIDEntryRespEntry, resp, GIDEntrySize)} {
		if err == nil {
			err = r.Add(a)
		}
	}
	return r, err
}

// destroyMethods are the destroy method, handle attribute, response
// attribute and response size of each object (0 size: no response).
var destroyMethods = map[ObjectID]struct {
	method       MethodID
	handle, resp AttrID
	respLen      int
}{
	ObjectPD:      {MethodPDDestroy, AttrDestroyPDHandle, 0, 0},
	ObjectAH:      {MethodAHDestroy, AttrDestroyAHHandle, 0, 0},
	ObjectMR:      {MethodMRDestroy, AttrDestroyMRHandle, 0, 0},
	ObjectCQ:      {MethodCQDestroy, AttrDestroyCQHandle, AttrDestroyCQResp, DestroyCQRespSize},
	ObjectQP:      {MethodQPDestroy, AttrDestroyQPHandle, AttrDestroyQPResp, DestroyQPRespSize},
	ObjectSRQ:     {MethodSRQDestroy, AttrDestroySRQHandle, AttrDestroySRQResp, DestroySRQRespSize},
	MLX5ObjectUAR: {MLX5MethodUARObjDestroy, MLX5AttrUARObjDestroyHandle, 0, 0},
}

// Destroy builds <object>/DESTROY of handle h in b. CQ, QP and SRQ report
// their event counts (DestroyCQResp, DestroyQPResp, DestroySRQResp) at
// resp; the other objects ignore it. An object without a destroy method
// here is ErrBadValue.
func Destroy(b []byte, object ObjectID, h Handle, resp uint64, driverID DriverID) (Ioctl, error) {
	d, ok := destroyMethods[object]
	if !ok {
		return Ioctl{}, &FormatError{Struct: "ib_uverbs_ioctl_hdr", Field: "object_id", Offset: int(object), Err: ErrBadValue, Errno: syscall.EPROTONOSUPPORT}
	}
	r, err := NewIoctl(b, object, d.method, driverID)
	if err != nil {
		return r, err
	}
	if err := r.Add(AttrIDR(d.handle, h)); err != nil {
		return r, err
	}
	if d.respLen > 0 {
		err = r.Add(AttrPtrOut(d.resp, resp, d.respLen))
	}
	return r, err
}
