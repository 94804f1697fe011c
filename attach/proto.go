package attach

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// CommandWait is the longest the daemon takes over one socket request by
// design: a modify_qp or create_ah on a real wire waits up to this long
// for ARP. A client's deadline for a request allows it beyond the
// client's own timeout, so that a slow resolution is answered with its
// errno (EHOSTUNREACH) rather than taken for a dead daemon.
const CommandWait = 3 * time.Second

// Protocol constants.
const (
	Magic      = 0x50444e53 // "SNDP" little-endian
	Version    = 1
	HeaderSize = 16
	// MaxPayload bounds a message: a uverbs command and its response fit
	// in 1 KiB (provider.UverbsControl's buffers); counters text in 16.
	MaxPayload = 32 << 10
	// MaxFDs is the most file descriptors one message carries (Attach:
	// host memory and the ring).
	MaxFDs = 2
	// NameLen is the size of a device-name field.
	NameLen = 16
	// MaxSocketPath is the longest path of the daemon's socket (sun_path
	// holds 108 bytes, its NUL included).
	MaxSocketPath = 107
)

// Errors.
var (
	// ErrProtocol is a message that breaks the protocol (bad magic,
	// length, type, version or field). The daemon answers it with EPROTO
	// and keeps serving; a client treats it as a dead daemon.
	ErrProtocol = errors.New("attach: protocol error")
	// ErrPeerGone is the other end closing the socket.
	ErrPeerGone = errors.New("attach: peer closed the connection")
)

// Type is a message type.
type Type uint16

// Message types. A client sends Attach once, then any number of Uverbs
// and Sim requests, one at a time; the daemon answers each with the
// matching response type or with Error.
//
// A client may end with Detach (empty): the daemon tears the client's
// device down (as when the socket closes) and only then answers Detached
// (empty), so that once the client has the answer the device is free for
// the next ATTACH, whoever sends it. Detach came after the first daemons
// of Version 1, which do not know the type: they answer it, as any
// unknown type, with Error EPROTO and keep serving; a client then closes
// the socket and the daemon tears down when it notices, as before. The
// version stays 1 because neither side needs the other to know Detach.
// A client allows the answer the deadline of any request (its timeout
// and CommandWait), and takes a daemon that misses it for dead.
const (
	TAttach     Type = 1 // client: AttachReq + fds [host memory, ring]
	TAttached   Type = 2 // daemon: AttachResp
	TUverbs     Type = 3 // client: uverbs command bytes
	TUverbsResp Type = 4 // daemon: the command's response bytes
	TSim        Type = 5 // client: SimOp + arguments
	TSimResp    Type = 6 // daemon: the op's result
	TError      Type = 7 // daemon: ErrorMsg
	TDetach     Type = 8 // client: nothing; the last request of a connection
	TDetached   Type = 9 // daemon: nothing; the device is free again
)

func (t Type) String() string {
	switch t {
	case TAttach:
		return "ATTACH"
	case TAttached:
		return "ATTACHED"
	case TUverbs:
		return "UVERBS"
	case TUverbsResp:
		return "UVERBS_RESP"
	case TSim:
		return "SIM"
	case TSimResp:
		return "SIM_RESP"
	case TError:
		return "ERROR"
	case TDetach:
		return "DETACH"
	case TDetached:
		return "DETACHED"
	}
	return fmt.Sprintf("Type(%d)", uint16(t))
}

// Header is a message's first 16 bytes, little-endian:
//
//	offset size
//	     0    4  magic "SNDP"
//	     4    2  type
//	     6    2  reserved, zero
//	     8    4  sequence: a request's number, echoed by its response
//	    12    4  payload length, at most MaxPayload; must equal what follows
type Header struct {
	Type Type
	Seq  uint32
	Len  uint32
}

// Conn is one end of a daemon connection: a unix SOCK_SEQPACKET socket,
// one message per packet.
type Conn struct {
	c    *net.UnixConn
	rbuf []byte
	wbuf []byte
	oob  []byte
}

// NewConn wraps a connected unix seqpacket socket.
func NewConn(c *net.UnixConn) *Conn {
	return &Conn{c: c, rbuf: make([]byte, HeaderSize+MaxPayload+1), wbuf: make([]byte, 0, HeaderSize+MaxPayload),
		oob: make([]byte, syscall.CmsgSpace(4*MaxFDs)+64)}
}

// Dial connects to the daemon's socket at path.
func Dial(path string, timeout time.Duration) (*Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("unixpacket", path)
	if err != nil {
		return nil, err
	}
	return NewConn(c.(*net.UnixConn)), nil
}

// Close closes the socket.
func (c *Conn) Close() error { return c.c.Close() }

// SetDeadline bounds every later Send and Recv (the zero Time: none).
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// Send sends one message, with fds as SCM_RIGHTS (the caller keeps its
// own copies of them).
func (c *Conn) Send(t Type, seq uint32, payload []byte, fds ...int) error {
	if len(payload) > MaxPayload || len(fds) > MaxFDs {
		return fmt.Errorf("%w: sending %d bytes and %d fds", ErrProtocol, len(payload), len(fds))
	}
	b := c.wbuf[:HeaderSize]
	le := binary.LittleEndian
	le.PutUint32(b[0:], Magic)
	le.PutUint16(b[4:], uint16(t))
	le.PutUint16(b[6:], 0)
	le.PutUint32(b[8:], seq)
	le.PutUint32(b[12:], uint32(len(payload)))
	b = append(b, payload...)
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	_, _, err := c.c.WriteMsgUnix(b, oob, nil)
	return err
}

// Recv reads one message. The payload aliases the connection's buffer
// until the next Recv. fds received are the caller's to close, even when
// Recv fails after receiving them.
func (c *Conn) Recv() (Header, []byte, []int, error) {
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.rbuf, c.oob)
	var fds []int
	if oobn > 0 {
		fds = parseRights(c.oob[:oobn])
	}
	if errors.Is(err, io.EOF) || err == nil && n == 0 {
		// An empty SOCK_SEQPACKET message reads as zero bytes, as the
		// end of the connection does (the net package calls both EOF):
		// only the peer's shutdown tells them apart. An empty message is
		// malformed, not a goodbye.
		if !PeerClosed(c.c) {
			return Header{}, nil, fds, fmt.Errorf("%w: empty message", ErrProtocol)
		}
		return Header{}, nil, fds, ErrPeerGone
	}
	if err != nil {
		return Header{}, nil, fds, err
	}
	if flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
		return Header{}, nil, fds, fmt.Errorf("%w: message truncated (flags %#x)", ErrProtocol, flags)
	}
	h, p, err := ParseMessage(c.rbuf[:n])
	return h, p, fds, err
}

// parseRights extracts the fds of every SCM_RIGHTS message in oob.
func parseRights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// ParseMessage checks a message's header against its length and returns
// the header and payload.
func ParseMessage(b []byte) (Header, []byte, error) {
	if len(b) < HeaderSize {
		return Header{}, nil, fmt.Errorf("%w: message of %d bytes, header is %d", ErrProtocol, len(b), HeaderSize)
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[0:]); m != Magic {
		return Header{}, nil, fmt.Errorf("%w: magic %#x", ErrProtocol, m)
	}
	h := Header{Type: Type(le.Uint16(b[4:])), Seq: le.Uint32(b[8:]), Len: le.Uint32(b[12:])}
	if r := le.Uint16(b[6:]); r != 0 {
		return h, nil, fmt.Errorf("%w: reserved header bits %#x", ErrProtocol, r)
	}
	if h.Type < TAttach || h.Type > TDetached {
		return h, nil, fmt.Errorf("%w: unknown message type %d", ErrProtocol, uint16(h.Type))
	}
	if h.Len > MaxPayload || int(h.Len) != len(b)-HeaderSize {
		return h, nil, fmt.Errorf("%w: %v payload length %d in a message of %d bytes", ErrProtocol, h.Type, h.Len, len(b))
	}
	return h, b[HeaderSize:], nil
}

// ---- Attach ----

// AttachReq is the first message of a connection. Its fds are the host
// memory memfd (sealed against shrinking, shm.Map) and the ring's memfd.
//
//	offset size
//	     0    4  Version
//	     4   16  device name, NUL-padded ("softnic0")
//	    20    4  reserved, zero
//	    24    8  IOVA of byte 0 of host memory (4 KiB aligned, not 0)
//	    32    8  host memory size (a multiple of 4096)
//	    40    8  ring size (the ring's bytes; its memfd holds at least
//	             this rounded up to a multiple of 4096)
type AttachReq struct {
	Version  uint32
	Device   string
	MemBase  uint64
	MemSize  uint64
	RingSize uint64
}

// AttachReqSize is an AttachReq's encoded size.
const AttachReqSize = 48

// Encode appends r's encoding to b.
func (r *AttachReq) Encode(b []byte) ([]byte, error) {
	if len(r.Device) == 0 || len(r.Device) >= NameLen {
		return b, fmt.Errorf("%w: device name %q", ErrProtocol, r.Device)
	}
	var p [AttachReqSize]byte
	le := binary.LittleEndian
	le.PutUint32(p[0:], r.Version)
	copy(p[4:4+NameLen], r.Device)
	le.PutUint64(p[24:], r.MemBase)
	le.PutUint64(p[32:], r.MemSize)
	le.PutUint64(p[40:], r.RingSize)
	return append(b, p[:]...), nil
}

// DecodeAttachReq parses an AttachReq.
func DecodeAttachReq(p []byte) (AttachReq, error) {
	if len(p) != AttachReqSize {
		return AttachReq{}, fmt.Errorf("%w: ATTACH of %d bytes, want %d", ErrProtocol, len(p), AttachReqSize)
	}
	le := binary.LittleEndian
	name, err := decodeName(p[4 : 4+NameLen])
	if err != nil {
		return AttachReq{}, err
	}
	if le.Uint32(p[20:]) != 0 {
		return AttachReq{}, fmt.Errorf("%w: ATTACH reserved word", ErrProtocol)
	}
	return AttachReq{Version: le.Uint32(p[0:]), Device: name, MemBase: le.Uint64(p[24:]),
		MemSize: le.Uint64(p[32:]), RingSize: le.Uint64(p[40:])}, nil
}

// decodeName reads a NUL-padded printable name.
func decodeName(b []byte) (string, error) {
	n := 0
	for n < len(b) && b[n] != 0 {
		if b[n] < 0x21 || b[n] > 0x7e {
			return "", fmt.Errorf("%w: name byte %#x", ErrProtocol, b[n])
		}
		n++
	}
	for _, c := range b[n:] {
		if c != 0 {
			return "", fmt.Errorf("%w: name not NUL-padded", ErrProtocol)
		}
	}
	if n == 0 {
		return "", fmt.Errorf("%w: empty name", ErrProtocol)
	}
	return string(b[:n]), nil
}

// AttachResp is the daemon's acceptance: who the device is and the BAR
// layout the client's host model needs.
//
//	offset size
//	     0    4  trace node of the device
//	     4    4  reserved, zero
//	     8    8  the daemon's virtual time, ps (the client's host clock starts there)
//	    16    6  MAC
//	    22    2  reserved, zero
//	    24   16  GID (::ffff:IPv4)
//	    40   32  profile name, NUL-padded
//	    72    4  first UAR page index
//	    76    4  UAR pages
//	    80    4  bfreg size (0: no BlueFlame)
//	    84    4  flags: bit 0, UAR pages are mapped uncached
type AttachResp struct {
	Node         uint32
	Now          int64
	MAC          [6]byte
	GID          [16]byte
	Profile      string
	FirstUAR     uint32
	NumUARs      uint32
	BFRegSize    uint32
	UARNonCached bool
}

// AttachRespSize is an AttachResp's encoded size.
const AttachRespSize = 88

// MaxUARs bounds NumUARs (a BAR0 of 64 MiB holds 16 K pages).
const MaxUARs = 1 << 14

// Encode appends r's encoding to b.
func (r *AttachResp) Encode(b []byte) []byte {
	var p [AttachRespSize]byte
	le := binary.LittleEndian
	le.PutUint32(p[0:], r.Node)
	le.PutUint64(p[8:], uint64(r.Now))
	copy(p[16:22], r.MAC[:])
	copy(p[24:40], r.GID[:])
	copy(p[40:72], r.Profile)
	le.PutUint32(p[72:], r.FirstUAR)
	le.PutUint32(p[76:], r.NumUARs)
	le.PutUint32(p[80:], r.BFRegSize)
	if r.UARNonCached {
		p[84] = 1
	}
	return append(b, p[:]...)
}

// DecodeAttachResp parses an AttachResp.
func DecodeAttachResp(p []byte) (AttachResp, error) {
	if len(p) != AttachRespSize {
		return AttachResp{}, fmt.Errorf("%w: ATTACHED of %d bytes, want %d", ErrProtocol, len(p), AttachRespSize)
	}
	le := binary.LittleEndian
	r := AttachResp{Node: le.Uint32(p[0:]), Now: int64(le.Uint64(p[8:]))}
	if r.Now < 0 {
		return AttachResp{}, fmt.Errorf("%w: ATTACHED time %d", ErrProtocol, r.Now)
	}
	copy(r.MAC[:], p[16:22])
	copy(r.GID[:], p[24:40])
	name, err := decodeName(p[40:72])
	if err != nil {
		return AttachResp{}, err
	}
	r.Profile = name
	r.FirstUAR, r.NumUARs, r.BFRegSize = le.Uint32(p[72:]), le.Uint32(p[76:]), le.Uint32(p[80:])
	flags := le.Uint32(p[84:])
	r.UARNonCached = flags&1 != 0
	switch {
	case flags&^1 != 0:
		return AttachResp{}, fmt.Errorf("%w: ATTACHED flags %#x", ErrProtocol, flags)
	case r.NumUARs == 0 || r.NumUARs > MaxUARs || r.FirstUAR > MaxUARs:
		return AttachResp{}, fmt.Errorf("%w: ATTACHED UARs %d from %d", ErrProtocol, r.NumUARs, r.FirstUAR)
	case r.BFRegSize%64 != 0 || r.BFRegSize > 4096:
		return AttachResp{}, fmt.Errorf("%w: ATTACHED bfreg size %d", ErrProtocol, r.BFRegSize)
	}
	return r, nil
}

// ---- Error ----

// ErrorMsg is a refusal: an errno and the daemon's reason.
//
//	offset size
//	     0    4  errno
//	     4   ...  reason, UTF-8 (at most 1024 bytes)
type ErrorMsg struct {
	Errno  syscall.Errno
	Reason string
}

// Encode appends e's encoding to b.
func (e *ErrorMsg) Encode(b []byte) []byte {
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], uint32(e.Errno))
	r := e.Reason
	if len(r) > 1024 {
		r = r[:1024]
	}
	return append(append(b, w[:]...), r...)
}

// DecodeError parses an ErrorMsg.
func DecodeError(p []byte) (ErrorMsg, error) {
	if len(p) < 4 || len(p) > 4+1024 {
		return ErrorMsg{}, fmt.Errorf("%w: ERROR of %d bytes", ErrProtocol, len(p))
	}
	e := ErrorMsg{Errno: syscall.Errno(binary.LittleEndian.Uint32(p)), Reason: string(p[4:])}
	if e.Errno == 0 || e.Errno > 4095 {
		return ErrorMsg{}, fmt.Errorf("%w: ERROR errno %d", ErrProtocol, uint32(e.Errno))
	}
	return e, nil
}

// Error is how a client reports an ErrorMsg: errors.Is matches its errno.
func (e *ErrorMsg) Error() string { return fmt.Sprintf("softnic daemon: %v: %s", e.Errno, e.Reason) }

// Unwrap makes errors.Is(err, syscall.EBUSY) and the like work.
func (e *ErrorMsg) Unwrap() error { return e.Errno }
