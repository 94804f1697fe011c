package uverbs

import (
	"encoding/binary"
	"syscall"
)

// Header sizes in bytes.
const (
	CmdHdrSize   = 8  // ib_uverbs_cmd_hdr
	ExCmdHdrSize = 16 // ib_uverbs_ex_cmd_hdr
	IoctlHdrSize = 24 // ib_uverbs_ioctl_hdr
	AttrSize     = 16 // ib_uverbs_attr
	// MaxIoctlLen is the kernel's limit on an ioctl request: one page
	// (uverbs_ioctl.c refuses a length above PAGE_SIZE).
	MaxIoctlLen = 4096
	// MaxIoctlAttrs is how many attributes fit in MaxIoctlLen.
	MaxIoctlAttrs = (MaxIoctlLen - IoctlHdrSize) / AttrSize
)

// IsIoctl reports whether b is an ioctl request rather than a write()
// command: its first u16 (ib_uverbs_ioctl_hdr.length) is len(b), at least
// IoctlHdrSize, and agrees with num_attrs. A write() starts with its
// command number (0..0xff, or with bit 31 set): only a 24- or 40-byte
// write of command 24 or 40 could match, and neither is a valid write
// (CREATE_QP is 64 bytes and more, 40 is no command).
func IsIoctl(b []byte) bool {
	if len(b) < IoctlHdrSize {
		return false
	}
	n := int(binary.NativeEndian.Uint16(b))
	return n == len(b) && (n-IoctlHdrSize)%AttrSize == 0 &&
		int(binary.NativeEndian.Uint16(b[6:])) == (n-IoctlHdrSize)/AttrSize
}

// ---------------------------------------------------------------- views

// CmdHdr is a view of an ib_uverbs_cmd_hdr.
//
//	bytes 0-3  command (bit 31: extended)
//	bytes 4-5  in_words
//	bytes 6-7  out_words
type CmdHdr []byte

// Offsets in ib_uverbs_cmd_hdr.
const (
	cmdHdrCommand  = 0
	cmdHdrInWords  = 4
	cmdHdrOutWords = 6
)

func (h CmdHdr) Command() uint32  { return binary.NativeEndian.Uint32(h[cmdHdrCommand:]) }
func (h CmdHdr) InWords() uint16  { return binary.NativeEndian.Uint16(h[cmdHdrInWords:]) }
func (h CmdHdr) OutWords() uint16 { return binary.NativeEndian.Uint16(h[cmdHdrOutWords:]) }
func (h CmdHdr) Extended() bool   { return h.Command()&CmdFlagExtended != 0 }
func (h CmdHdr) Cmd() Command     { return Command(h.Command() & CmdCommandMask) }

// ExCmdHdr is a view of an ib_uverbs_ex_cmd_hdr.
//
//	bytes 0-7    response (user address of the core response)
//	bytes 8-9    provider_in_words (driver input, 8-byte words)
//	bytes 10-11  provider_out_words
//	bytes 12-15  cmd_hdr_reserved (0)
type ExCmdHdr []byte

// Offsets in ib_uverbs_ex_cmd_hdr.
const (
	exHdrResponse = 0
	exHdrProvIn   = 8
	exHdrProvOut  = 10
	exHdrReserved = 12
)

func (h ExCmdHdr) Response() uint64         { return binary.NativeEndian.Uint64(h[exHdrResponse:]) }
func (h ExCmdHdr) ProviderInWords() uint16  { return binary.NativeEndian.Uint16(h[exHdrProvIn:]) }
func (h ExCmdHdr) ProviderOutWords() uint16 { return binary.NativeEndian.Uint16(h[exHdrProvOut:]) }
func (h ExCmdHdr) Reserved() uint32         { return binary.NativeEndian.Uint32(h[exHdrReserved:]) }

// IoctlHdr is a view of an ib_uverbs_ioctl_hdr and the attributes after it.
//
//	bytes 0-1    length (24 + 16*num_attrs)
//	bytes 2-3    object_id
//	bytes 4-5    method_id
//	bytes 6-7    num_attrs
//	bytes 8-15   reserved1 (0)
//	bytes 16-19  driver_id
//	bytes 20-23  reserved2 (0)
//	bytes 24-    attrs[num_attrs]
type IoctlHdr []byte

// Offsets in ib_uverbs_ioctl_hdr.
const (
	ioLength    = 0
	ioObject    = 2
	ioMethod    = 4
	ioNumAttrs  = 6
	ioReserved1 = 8
	ioDriverID  = 16
	ioReserved2 = 20
)

func (h IoctlHdr) Length() uint16     { return binary.NativeEndian.Uint16(h[ioLength:]) }
func (h IoctlHdr) ObjectID() ObjectID { return ObjectID(binary.NativeEndian.Uint16(h[ioObject:])) }
func (h IoctlHdr) MethodID() MethodID { return MethodID(binary.NativeEndian.Uint16(h[ioMethod:])) }
func (h IoctlHdr) NumAttrs() int      { return int(binary.NativeEndian.Uint16(h[ioNumAttrs:])) }
func (h IoctlHdr) DriverID() DriverID { return DriverID(binary.NativeEndian.Uint32(h[ioDriverID:])) }

// Attr returns attribute i. It panics if i is out of range or the view is
// shorter than the attribute, like a slice index: use it on a header that
// ParseIoctl accepted, with i < NumAttrs().
func (h IoctlHdr) Attr(i int) Attr {
	o := IoctlHdrSize + i*AttrSize
	return Attr(h[o : o+AttrSize])
}

// Attr is a view of an ib_uverbs_attr.
//
//	bytes 0-1  attr_id
//	bytes 2-3  len
//	bytes 4-5  flags (MANDATORY 1, VALID_OUTPUT 2)
//	byte  6    attr_data.enum_data.elem_id
//	byte  7    attr_data.enum_data.reserved (0)
//	bytes 8-15 data: a user pointer, inline data (len <= 8), an IDR handle or an fd
type Attr []byte

// Offsets in ib_uverbs_attr.
const (
	attrID     = 0
	attrLen    = 2
	attrFlags  = 4
	attrElemID = 6
	attrRsv    = 7
	attrData   = 8
)

func (a Attr) ID() AttrID    { return AttrID(binary.NativeEndian.Uint16(a[attrID:])) }
func (a Attr) Len() int      { return int(binary.NativeEndian.Uint16(a[attrLen:])) }
func (a Attr) Flags() uint16 { return binary.NativeEndian.Uint16(a[attrFlags:]) }
func (a Attr) ElemID() uint8 { return a[attrElemID] }
func (a Attr) Data() uint64  { return binary.NativeEndian.Uint64(a[attrData:]) }

// Inline returns the attribute's inline data (len <= 8 bytes, stored in the
// data word as the kernel reads it) and false if the data is a pointer.
func (a Attr) Inline() ([]byte, bool) {
	n := a.Len()
	if n > 8 {
		return nil, false
	}
	return a[attrData : attrData+n], true
}

// SetData sets the data word (the kernel writes a new object's handle or
// an FD_OUT there).
func (a Attr) SetData(v uint64) { binary.NativeEndian.PutUint64(a[attrData:], v) }

// SetFlags sets the flags (the kernel ORs in AttrFValidOutput).
func (a Attr) SetFlags(f uint16) { binary.NativeEndian.PutUint16(a[attrFlags:], f) }

// ---------------------------------------------------------------- write()

// coreSizes are the fixed core request and response sizes of each write
// command (uverbs.md §3.3); driver data is what follows them.
var coreSizes = map[Command][2]int{
	CmdGetContext: {GetContextSize, GetContextRespSize}, CmdQueryDevice: {QueryDeviceSize, QueryDeviceRespSize},
	CmdQueryPort: {QueryPortSize, QueryPortRespSize}, CmdAllocPD: {AllocPDSize, AllocPDRespSize},
	CmdDeallocPD: {DeallocPDSize, 0}, CmdCreateAH: {CreateAHSize, CreateAHRespSize}, CmdDestroyAH: {DestroyAHSize, 0},
	CmdRegMR: {RegMRSize, RegMRRespSize}, CmdDeregMR: {DeregMRSize, 0},
	CmdCreateCompChannel: {CreateCompChannelSize, CreateCompChannelRespSize},
	CmdCreateCQ:          {CreateCQSize, CreateCQRespSize}, CmdDestroyCQ: {DestroyCQSize, DestroyCQRespSize},
	CmdReqNotifyCQ: {ReqNotifyCQSize, 0}, CmdCreateQP: {CreateQPSize, CreateQPRespSize},
	CmdQueryQP: {QueryQPSize, QueryQPRespSize}, CmdModifyQP: {ModifyQPSize, 0},
	CmdDestroyQP: {DestroyQPSize, DestroyQPRespSize}, CmdCreateSRQ: {CreateSRQSize, CreateSRQRespSize},
	CmdModifySRQ: {ModifySRQSize, 0}, CmdQuerySRQ: {QuerySRQSize, QuerySRQRespSize},
	CmdDestroySRQ: {DestroySRQSize, DestroySRQRespSize},
	// The work requests and SGEs of the POST commands follow the core
	// struct where other commands carry driver data.
	CmdPostSend: {PostSendSize, PostSendRespSize}, CmdPostRecv: {PostRecvSize, PostRecvRespSize},
	CmdPostSRQRecv: {PostSRQRecvSize, PostSRQRecvRespSize},
}

// exCoreSizes are the same for the extended commands.
var exCoreSizes = map[Command][2]int{
	ExCmdQueryDevice: {ExQueryDeviceSize, ExQueryDeviceRespSize}, ExCmdCreateCQ: {ExCreateCQSize, ExCreateCQRespSize},
	ExCmdCreateQP: {ExCreateQPSize, ExCreateQPRespSize}, ExCmdModifyQP: {ExModifyQPSize, ExModifyQPRespSize},
}

// udataCmds are the legacy commands whose bytes after the core request
// are driver data (UAPI_DEF_WRITE_UDATA_IO/_I in uverbs_cmd.c). For the
// others the kernel's uverbs_request takes those bytes as a longer core
// request, which must be zero beyond the struct (EOPNOTSUPP otherwise);
// the POST commands carry their work requests there instead.
var udataCmds = map[Command]bool{
	CmdGetContext: true, CmdAllocPD: true, CmdRegMR: true, CmdCreateCQ: true, CmdResizeCQ: true,
	CmdCreateQP: true, CmdCreateAH: true, CmdCreateSRQ: true, CmdModifySRQ: true,
	11 /* REREG_MR */ : true, 14 /* ALLOC_MW */ : true, 37 /* OPEN_XRCD */ : true, 39 /* CREATE_XSRQ */ : true, 40 /* OPEN_QP */ : true,
}

// The kernel's write command tables end at OPEN_QP (40) and, extended, at
// MODIFY_CQ (57): a number beyond them is EOPNOTSUPP before any length is
// looked at; one inside them that the device does not implement gets the
// "not supported" method, whose (legacy) length check comes first
// (uverbs_uapi.c uapi_finalize, uverbs_main.c uapi_get_method).
const (
	NumWriteCmds   = 41
	NumWriteExCmds = 58
	// ExCmdThreshold is the first extended command number
	// (IB_USER_VERBS_CMD_THRESHOLD): the extended table holds entries
	// from it on.
	ExCmdThreshold = 50
)

// TakesUData reports whether the bytes after a legacy command's core
// request are driver (udata) input rather than part of the core request.
func TakesUData(c Command) bool { return udataCmds[c] }

// exMinSizes are the shortest core request and response the kernel takes
// for each extended command: offsetofend of the last member its
// UAPI_DEF_WRITE_IO_EX names (uverbs_cmd.c: query_device reserved /
// response_length, create_cq reserved / response_length, create_qp
// comp_mask / response_length, modify_qp base / response_length; the ends
// printed with gcc against the uapi headers). A shorter request is ENOSPC;
// one shorter than the struct but not than this is zero-filled
// (uverbs_request). Which member each command names is from the K6.1
// source as recalled, not re-read here [unconfirmed].
var exMinSizes = map[Command][2]int{
	ExCmdQueryDevice: {8, 184}, ExCmdCreateCQ: {32, 16}, ExCmdCreateQP: {52, 40}, ExCmdModifyQP: {112, 8},
}

// CoreSizes returns the core request and response sizes of a write
// command (extended: of the ex form), and false for a command this package
// does not describe.
func CoreSizes(c Command, extended bool) (req, resp int, ok bool) {
	m := coreSizes
	if extended {
		m = exCoreSizes
	}
	s, ok := m[c]
	return s[0], s[1], ok
}

// PutWriteHdr writes the ib_uverbs_cmd_hdr of a legacy (non-extended)
// write() command whose body (core request then driver data, bodyLen bytes)
// the caller encodes at b[CmdHdrSize:]. outLen is the size of the response
// buffer (core response plus driver response) whose address is the body's
// first u64. The write() length is the returned n = CmdHdrSize+bodyLen:
// in_words counts the header too (uverbs.md §3.1).
func PutWriteHdr(b []byte, cmd Command, bodyLen, outLen int) (n int, err error) {
	n = CmdHdrSize + bodyLen
	switch {
	case bodyLen < 0 || outLen < 0 || n%4 != 0 || outLen%4 != 0 || n/4 > 0xffff || outLen/4 > 0xffff:
		return 0, &FormatError{Struct: "ib_uverbs_cmd_hdr", Field: "in_words", Offset: n, Err: ErrBadLength, Errno: syscall.EINVAL}
	case len(b) < n:
		return 0, shortBuffer("ib_uverbs_cmd_hdr", n, len(b))
	}
	binary.NativeEndian.PutUint32(b[cmdHdrCommand:], uint32(cmd)&CmdCommandMask)
	binary.NativeEndian.PutUint16(b[cmdHdrInWords:], uint16(n/4))
	binary.NativeEndian.PutUint16(b[cmdHdrOutWords:], uint16(outLen/4))
	return n, nil
}

// PutExWriteHdr writes the two headers of an extended write() command:
// ib_uverbs_cmd_hdr with CmdFlagExtended, then ib_uverbs_ex_cmd_hdr. The
// caller encodes the core request (coreLen bytes) and the driver data
// (drvLen) at b[CmdHdrSize+ExCmdHdrSize:]. All four lengths are in bytes
// and must be multiples of 8; response is the address of the core response,
// whose driver part follows it (0 with both out lengths 0). The write()
// length is the returned n.
func PutExWriteHdr(b []byte, cmd Command, coreLen, drvLen, coreOutLen, drvOutLen int, response uint64) (n int, err error) {
	n = CmdHdrSize + ExCmdHdrSize + coreLen + drvLen
	bad := func(l int) bool { return l < 0 || l%8 != 0 || l/8 > 0xffff }
	switch {
	case bad(coreLen) || bad(drvLen) || bad(coreOutLen) || bad(drvOutLen):
		return 0, &FormatError{Struct: "ib_uverbs_ex_cmd_hdr", Field: "provider_in_words", Offset: n, Err: ErrBadLength, Errno: syscall.EINVAL}
	case (response == 0) != (coreOutLen+drvOutLen == 0):
		return 0, &FormatError{Struct: "ib_uverbs_ex_cmd_hdr", Field: "response", Err: ErrBadLength, Errno: syscall.EINVAL}
	case len(b) < n:
		return 0, shortBuffer("ib_uverbs_ex_cmd_hdr", n, len(b))
	}
	binary.NativeEndian.PutUint32(b[cmdHdrCommand:], uint32(cmd)&CmdCommandMask|CmdFlagExtended)
	binary.NativeEndian.PutUint16(b[cmdHdrInWords:], uint16(coreLen/8))
	binary.NativeEndian.PutUint16(b[cmdHdrOutWords:], uint16(coreOutLen/8))
	x := b[CmdHdrSize:]
	binary.NativeEndian.PutUint64(x[exHdrResponse:], response)
	binary.NativeEndian.PutUint16(x[exHdrProvIn:], uint16(drvLen/8))
	binary.NativeEndian.PutUint16(x[exHdrProvOut:], uint16(drvOutLen/8))
	binary.NativeEndian.PutUint32(x[exHdrReserved:], 0)
	return n, nil
}

// EncodeWrite encodes a whole legacy write() command into b: the header,
// core and, if not nil, driver. outLen is the response buffer size, core
// response plus driver response. It returns the write() length. Its
// interface arguments escape (two allocations when core and driver live on
// the stack); hot paths call PutWriteHdr and the structs' Encode directly,
// which allocate nothing.
func EncodeWrite(b []byte, cmd Command, core, driver Struct, outLen int) (int, error) {
	body := core.Size()
	if driver != nil {
		body += driver.Size()
	}
	n, err := PutWriteHdr(b, cmd, body, outLen)
	if err != nil {
		return 0, err
	}
	k, _ := core.Encode(b[CmdHdrSize:])
	if driver != nil {
		_, _ = driver.Encode(b[CmdHdrSize+k:])
	}
	return n, nil
}

// WriteMsg is a write() command as the kernel splits it. Its slices alias
// the input.
type WriteMsg struct {
	Cmd      Command
	Extended bool
	// Core is the core request. For a legacy command it is the first
	// CoreSizes bytes after the header; for a command CoreSizes does not
	// know it is the whole body and Driver is nil.
	Core []byte
	// Driver is the driver (udata) input that follows the core request
	// (for POST_SEND, POST_RECV and POST_SRQ_RECV: the work requests).
	Driver []byte
	// Response is the user address of the response: for a legacy command
	// the first u64 of Core (meaningless for commands without a
	// response), for an extended one ex_hdr.response.
	Response uint64
	// OutLen is the response buffer size in bytes (legacy: core + driver;
	// extended: core only), DriverOutLen the extended driver response size.
	OutLen, DriverOutLen int
}

// ParseWrite checks a write() buffer as ib_uverbs_write does and splits
// it. A buffer shorter than its header(s) is EINVAL. For a legacy command
// the length must equal in_words*4 (EINVAL) and cover the core request,
// and out_words*4 the core response (ENOSPC otherwise); for an extended
// one the length must be 24 + (in_words+provider_in_words)*8, the reserved
// word 0 and the response address set exactly when there are out words
// (EINVAL), and for the commands it knows the core request and, with a
// response, the out words at least the kernel's minimum (ENOSPC). It
// never panics.
func ParseWrite(b []byte) (WriteMsg, error) {
	var m WriteMsg
	if len(b) < CmdHdrSize {
		// ib_uverbs_write: count < sizeof(hdr) is EINVAL, not ENOSPC.
		return m, &FormatError{Struct: "ib_uverbs_cmd_hdr", Offset: len(b), Need: CmdHdrSize, Err: ErrTruncated, Errno: syscall.EINVAL}
	}
	h := CmdHdr(b)
	m.Cmd, m.Extended = h.Cmd(), h.Extended()
	if raw := h.Command() &^ (CmdFlagExtended | CmdCommandMask); raw != 0 {
		return m, &FormatError{Struct: "ib_uverbs_cmd_hdr", Field: "command", Err: ErrReserved, Errno: syscall.EINVAL}
	}
	if !m.Extended {
		if int(h.InWords())*4 != len(b) {
			return m, &FormatError{Struct: "ib_uverbs_cmd_hdr", Field: "in_words", Offset: cmdHdrInWords, Err: ErrBadLength, Errno: syscall.EINVAL}
		}
		body := b[CmdHdrSize:]
		m.OutLen = int(h.OutWords()) * 4
		req, resp, ok := CoreSizes(m.Cmd, false)
		if !ok {
			m.Core = body
		} else {
			if len(body) < req {
				return m, truncated(m.Cmd.String(), CmdHdrSize+req, len(b))
			}
			if m.OutLen < resp {
				return m, &FormatError{Struct: "ib_uverbs_cmd_hdr", Field: "out_words", Offset: m.OutLen, Need: resp, Err: ErrTruncated, Errno: syscall.ENOSPC}
			}
			m.Core, m.Driver = body[:req], body[req:]
		}
		if len(m.Core) >= 8 {
			m.Response = binary.NativeEndian.Uint64(m.Core)
		}
		return m, nil
	}
	if len(b) < CmdHdrSize+ExCmdHdrSize {
		// ib_uverbs_write: an extended command shorter than both headers
		// is EINVAL.
		return m, &FormatError{Struct: "ib_uverbs_ex_cmd_hdr", Offset: len(b), Need: CmdHdrSize + ExCmdHdrSize, Err: ErrTruncated, Errno: syscall.EINVAL}
	}
	// verify_hdr's order: the words, the core request's minimum, the
	// reserved word, the response.
	x := ExCmdHdr(b[CmdHdrSize:])
	core, drv := int(h.InWords())*8, int(x.ProviderInWords())*8
	if CmdHdrSize+ExCmdHdrSize+core+drv != len(b) {
		return m, &FormatError{Struct: "ib_uverbs_ex_cmd_hdr", Field: "provider_in_words", Offset: CmdHdrSize + exHdrProvIn, Err: ErrBadLength, Errno: syscall.EINVAL}
	}
	lim, known := exMinSizes[m.Cmd]
	if known && core < lim[0] {
		return m, truncated(m.Cmd.String(), lim[0], core)
	}
	if x.Reserved() != 0 {
		return m, reserved("ib_uverbs_ex_cmd_hdr", "cmd_hdr_reserved", CmdHdrSize+exHdrReserved)
	}
	m.OutLen, m.DriverOutLen = int(h.OutWords())*8, int(x.ProviderOutWords())*8
	m.Response = x.Response()
	if (m.Response == 0) != (m.OutLen+m.DriverOutLen == 0) {
		return m, &FormatError{Struct: "ib_uverbs_ex_cmd_hdr", Field: "response", Err: ErrBadLength, Errno: syscall.EINVAL}
	}
	if known && m.Response != 0 && m.OutLen < lim[1] {
		return m, &FormatError{Struct: "ib_uverbs_cmd_hdr", Field: "out_words", Offset: m.OutLen, Need: lim[1], Err: ErrTruncated, Errno: syscall.ENOSPC}
	}
	body := b[CmdHdrSize+ExCmdHdrSize:]
	m.Core, m.Driver = body[:core], body[core:]
	return m, nil
}

// ---------------------------------------------------------------- ioctl()

// Ioctl builds an RDMA_VERBS_IOCTL request in a caller's buffer: the
// header, then attributes added one by one. Its methods do not allocate.
type Ioctl struct {
	b []byte
	n int
}

// NewIoctl starts a request for object.method on a device with driverID
// (the kernel refuses a driver_id that is not the device's).
func NewIoctl(b []byte, object ObjectID, method MethodID, driverID DriverID) (Ioctl, error) {
	if len(b) < IoctlHdrSize {
		return Ioctl{}, shortBuffer("ib_uverbs_ioctl_hdr", IoctlHdrSize, len(b))
	}
	h := IoctlHdrFields{Length: IoctlHdrSize, ObjectID: uint16(object), MethodID: uint16(method), DriverID: driverID}
	h.put(b)
	return Ioctl{b: b, n: 0}, nil
}

// Add appends one attribute.
func (r *Ioctl) Add(a AttrFields) error {
	o := IoctlHdrSize + r.n*AttrSize
	switch {
	case r.b == nil:
		return &FormatError{Struct: "ib_uverbs_ioctl_hdr", Err: ErrShortBuffer, Errno: syscall.EINVAL}
	case r.n >= MaxIoctlAttrs:
		return &FormatError{Struct: "ib_uverbs_ioctl_hdr", Field: "length", Offset: o + AttrSize, Err: ErrBadLength, Errno: syscall.EINVAL}
	case len(r.b) < o+AttrSize:
		return shortBuffer("ib_uverbs_attr", o+AttrSize, len(r.b))
	}
	a.put(r.b[o:])
	r.n++
	binary.NativeEndian.PutUint16(r.b[ioNumAttrs:], uint16(r.n))
	binary.NativeEndian.PutUint16(r.b[ioLength:], uint16(o+AttrSize))
	return nil
}

// Bytes is the request so far: pass its address to ioctl(fd, RDMAVerbsIoctl, ...).
func (r *Ioctl) Bytes() []byte { return r.b[:IoctlHdrSize+r.n*AttrSize] }

// Len is the request's length in bytes.
func (r *Ioctl) Len() int { return IoctlHdrSize + r.n*AttrSize }

// Attribute constructors, in rdma-core's conventions (every attribute
// mandatory; cmd_ioctl.h fill_attr_*).

// AttrPtrIn is a PTR_IN attribute of n bytes at user address p. For
// n <= 8 the kernel reads the data inline instead: use AttrInline.
func AttrPtrIn(id AttrID, p uint64, n int) AttrFields {
	return AttrFields{AttrID: uint16(id), Len: uint16(n), Flags: AttrFMandatory, Data: p}
}

// AttrInline is a PTR_IN attribute of up to 8 bytes carried in the data
// word; longer data is ErrBadAttr.
func AttrInline(id AttrID, data []byte) (AttrFields, error) {
	if len(data) > 8 {
		return AttrFields{}, &FormatError{Struct: "ib_uverbs_attr", Field: "len", Offset: len(data), Err: ErrBadAttr, Errno: syscall.EINVAL}
	}
	var w [8]byte
	copy(w[:], data)
	return AttrFields{AttrID: uint16(id), Len: uint16(len(data)), Flags: AttrFMandatory, Data: binary.NativeEndian.Uint64(w[:])}, nil
}

// AttrU32In is a 4-byte PTR_IN carried inline.
func AttrU32In(id AttrID, v uint32) AttrFields {
	return AttrFields{AttrID: uint16(id), Len: 4, Flags: AttrFMandatory, Data: uint64(v)}
}

// AttrConstIn is a CONST_IN (or u64 PTR_IN) attribute: len 8, the value inline.
func AttrConstIn(id AttrID, v uint64) AttrFields {
	return AttrFields{AttrID: uint16(id), Len: 8, Flags: AttrFMandatory, Data: v}
}

// AttrPtrOut is a PTR_OUT attribute: the kernel writes up to n bytes at
// user address p (always a pointer, even for 4 bytes) and sets
// AttrFValidOutput in this attribute's flags.
func AttrPtrOut(id AttrID, p uint64, n int) AttrFields {
	return AttrFields{AttrID: uint16(id), Len: uint16(n), Flags: AttrFMandatory, Data: p}
}

// AttrIDR names an existing object by handle (len 0).
func AttrIDR(id AttrID, h Handle) AttrFields {
	return AttrFields{AttrID: uint16(id), Flags: AttrFMandatory, Data: uint64(h)}
}

// AttrIDRNew asks for a new object; the kernel writes its handle into data.
func AttrIDRNew(id AttrID) AttrFields { return AttrIDR(id, 0) }

// AttrFDOut asks for a new file descriptor, returned in data.
func AttrFDOut(id AttrID) AttrFields { return AttrFields{AttrID: uint16(id), Flags: AttrFMandatory} }

// ParseIoctl checks a request as ib_uverbs_ioctl does before it looks at
// the method: at least a header, length = 24 + 16*num_attrs and at most a
// page, covered by b (EINVAL); reserved header words zero
// (EPROTONOSUPPORT); no attribute id twice and no reserved enum byte set
// (EINVAL). It never panics; the returned view's Attr(i) is safe for
// i < NumAttrs().
func ParseIoctl(b []byte) (IoctlHdr, error) {
	if len(b) < IoctlHdrSize {
		return nil, truncated("ib_uverbs_ioctl_hdr", IoctlHdrSize, len(b))
	}
	h := IoctlHdr(b)
	n := int(h.Length())
	if n > MaxIoctlLen || n != IoctlHdrSize+h.NumAttrs()*AttrSize {
		return nil, &FormatError{Struct: "ib_uverbs_ioctl_hdr", Field: "length", Offset: ioLength, Err: ErrBadLength, Errno: syscall.EINVAL}
	}
	if len(b) < n {
		return nil, truncated("ib_uverbs_ioctl_hdr", n, len(b))
	}
	if !IsZero(b[ioReserved1:ioDriverID]) || !IsZero(b[ioReserved2:IoctlHdrSize]) {
		return nil, &FormatError{Struct: "ib_uverbs_ioctl_hdr", Field: "reserved1/reserved2", Offset: ioReserved1, Err: ErrReserved, Errno: syscall.EPROTONOSUPPORT}
	}
	h = h[:n]
	for i := 0; i < h.NumAttrs(); i++ {
		a := h.Attr(i)
		if a[attrRsv] != 0 {
			return nil, &FormatError{Struct: "ib_uverbs_attr", Field: "attr_data.enum_data.reserved", Offset: IoctlHdrSize + i*AttrSize + attrRsv, Err: ErrReserved, Errno: syscall.EINVAL}
		}
		for j := 0; j < i; j++ {
			if h.Attr(j).ID() == a.ID() {
				return nil, &FormatError{Struct: "ib_uverbs_attr", Field: "attr_id", Offset: IoctlHdrSize + i*AttrSize, Err: ErrBadAttr, Errno: syscall.EINVAL}
			}
		}
	}
	return h, nil
}

// FindAttr returns the attribute with the id, if present.
func (h IoctlHdr) FindAttr(id AttrID) (Attr, bool) {
	for i := 0; i < h.NumAttrs(); i++ {
		if a := h.Attr(i); a.ID() == id {
			return a, true
		}
	}
	return nil, false
}

// ---------------------------------------------------------------- helpers for common requests

// InvokeWrite carries a legacy write command through the ioctl interface
// (DEVICE/INVOKE_WRITE, uverbs.md §2.4): WRITE_CMD, then CORE_IN (the core
// request without the 8-byte header, inline if it is at most 8 bytes,
// otherwise at coreIn), CORE_OUT, and UHW_IN/UHW_OUT when their lengths are
// not zero. coreInline holds the core bytes for the inline case and may be
// nil otherwise. Addresses are user addresses of buffers the caller keeps
// alive and unmoved.
type InvokeWrite struct {
	Cmd                 Command
	CoreIn              uint64
	CoreInLen           int
	CoreInline          []byte
	CoreOut             uint64
	CoreOutLen          int
	UHWIn, UHWOut       uint64
	UHWInLen, UHWOutLen int
}

// Encode builds the request in b for a device with driverID.
func (w *InvokeWrite) Encode(b []byte, driverID DriverID) (Ioctl, error) {
	r, err := NewIoctl(b, ObjectDevice, MethodInvokeWrite, driverID)
	if err != nil {
		return r, err
	}
	if err := r.Add(AttrConstIn(AttrWriteCmd, uint64(w.Cmd))); err != nil {
		return r, err
	}
	if w.CoreInLen > 0 {
		a := AttrPtrIn(AttrCoreIn, w.CoreIn, w.CoreInLen)
		if w.CoreInLen <= 8 {
			if a, err = AttrInline(AttrCoreIn, w.CoreInline); err != nil {
				return r, err
			}
			if len(w.CoreInline) != w.CoreInLen {
				return r, &FormatError{Struct: "ib_uverbs_attr", Field: "CORE_IN", Offset: len(w.CoreInline), Err: ErrBadAttr, Errno: syscall.EINVAL}
			}
		}
		if err := r.Add(a); err != nil {
			return r, err
		}
	}
	if w.CoreOutLen > 0 {
		if err := r.Add(AttrPtrOut(AttrCoreOut, w.CoreOut, w.CoreOutLen)); err != nil {
			return r, err
		}
	}
	if w.UHWInLen > 0 {
		if err := r.Add(AttrPtrIn(AttrUHWIn, w.UHWIn, w.UHWInLen)); err != nil {
			return r, err
		}
	}
	if w.UHWOutLen > 0 {
		if err := r.Add(AttrPtrOut(AttrUHWOut, w.UHWOut, w.UHWOutLen)); err != nil {
			return r, err
		}
	}
	return r, nil
}

// MLX5UARAlloc is MLX5_IB_METHOD_UAR_OBJ_ALLOC (uverbs.md §4.4): a dynamic
// UAR of the type; the kernel returns the handle in the HANDLE attribute's
// data and writes the mmap offset (u64), length (u32) and page id (u32) at
// the three addresses.
type MLX5UARAlloc struct {
	Type                           MLX5UARType
	MmapOffset, MmapLength, PageID uint64 // user addresses of the outputs
}

// Encode builds the request in b.
func (u *MLX5UARAlloc) Encode(b []byte) (Ioctl, error) {
	r, err := NewIoctl(b, MLX5ObjectUAR, MLX5MethodUARObjAlloc, DriverMLX5)
	if err != nil {
		return r, err
	}
	for _, a := range [...]AttrFields{
		AttrIDRNew(MLX5AttrUARObjAllocHandle),
		AttrConstIn(MLX5AttrUARObjAllocType, uint64(u.Type)),
		AttrPtrOut(MLX5AttrUARObjAllocMmapOffset, u.MmapOffset, 8),
		AttrPtrOut(MLX5AttrUARObjAllocMmapLength, u.MmapLength, 4),
		AttrPtrOut(MLX5AttrUARObjAllocPageID, u.PageID, 4),
	} {
		if err := r.Add(a); err != nil {
			return r, err
		}
	}
	return r, nil
}
