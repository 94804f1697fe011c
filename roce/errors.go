package roce

import (
	"errors"
	"strconv"
)

// Sentinel errors. Errors returned by ParseFrame and BuildFrame wrap one of
// these; test with errors.Is.
var (
	// ErrTruncated: the input is shorter than a header or a length field says.
	ErrTruncated = errors.New("truncated")
	// ErrNotRoCE: a well-formed frame that is not RoCEv2 (EtherType, IP
	// protocol, UDP port, IP fragment).
	ErrNotRoCE = errors.New("not a RoCEv2 packet")
	// ErrBadVersion: IP version or BTH transport version is not supported.
	ErrBadVersion = errors.New("bad version")
	// ErrBadICRC: the invariant CRC does not match.
	ErrBadICRC = errors.New("bad ICRC")
	// ErrBadOpcode: the BTH opcode is not in the opcode table.
	ErrBadOpcode = errors.New("bad opcode")
	// ErrBadLength: a length field, pad count or payload size is
	// inconsistent.
	ErrBadLength = errors.New("bad length")
	// ErrBadChecksum: the IPv4 header checksum does not match.
	ErrBadChecksum = errors.New("bad checksum")
	// ErrBufferTooSmall: the destination buffer cannot hold the frame.
	ErrBufferTooSmall = errors.New("buffer too small")
	// ErrBadAddress: IP addresses missing or of mixed families.
	ErrBadAddress = errors.New("bad address")
)

// Layer names used in ParseError and BuildError.
const (
	LayerEthernet = "Ethernet"
	LayerIPv4     = "IPv4"
	LayerIPv6     = "IPv6"
	LayerIP       = "IP"
	LayerUDP      = "UDP"
	LayerBTH      = "BTH"
	LayerExt      = "ExtHeaders"
	LayerPayload  = "Payload"
	LayerICRC     = "ICRC"
)

// ParseError is the error type returned by the parsers. Offset is the byte
// offset in the input where the problem is (the start of the layer or the
// field).
type ParseError struct {
	Layer  string // one of the Layer* constants
	Offset int
	Err    error  // a sentinel: ErrTruncated, ErrNotRoCE, ...
	Detail string // static human detail, may be empty
}

func (e *ParseError) Error() string {
	s := "roce: parse " + e.Layer + " at offset " + strconv.Itoa(e.Offset) + ": " + e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel.
func (e *ParseError) Unwrap() error { return e.Err }

func parseErr(layer string, off int, err error, detail string) *ParseError {
	return &ParseError{Layer: layer, Offset: off, Err: err, Detail: detail}
}

// BuildError is the error type returned by BuildFrame.
type BuildError struct {
	Field  string // the FrameParams field or argument at fault
	Err    error  // a sentinel
	Detail string
}

func (e *BuildError) Error() string {
	s := "roce: build " + e.Field + ": " + e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel.
func (e *BuildError) Unwrap() error { return e.Err }
