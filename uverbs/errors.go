package uverbs

import (
	"errors"
	"strconv"
	"syscall"
)

// Sentinel errors; every error from this package wraps one of them (and,
// for *Error, a syscall.Errno too). Test with errors.Is.
var (
	// ErrTruncated: the input is shorter than the struct or than a length
	// field says.
	ErrTruncated = errors.New("truncated")
	// ErrShortBuffer: the destination buffer cannot hold the encoding.
	ErrShortBuffer = errors.New("buffer too small")
	// ErrReserved: a reserved field is not zero.
	ErrReserved = errors.New("reserved field not zero")
	// ErrBadLength: a length or word count is inconsistent with the bytes
	// given (not a multiple of 4 or 8, not what the header says, too big).
	ErrBadLength = errors.New("bad length")
	// ErrBadAttr: an ioctl attribute that the kernel refuses (duplicate
	// id, bad inline length).
	ErrBadAttr = errors.New("bad attribute")
	// ErrBadTransition: the QP state transition is not in the table.
	ErrBadTransition = errors.New("QP state transition not allowed")
	// ErrMissingAttr: the transition requires attributes the mask lacks.
	ErrMissingAttr = errors.New("required QP attribute missing")
	// ErrExtraAttr: the mask names attributes the transition does not take.
	ErrExtraAttr = errors.New("QP attribute not allowed in this transition")
	// ErrBadValue: an enum value (QP type, state) outside its range.
	ErrBadValue = errors.New("value out of range")
)

// Error is a failed command, as the kernel reports it: the command, the
// errno and why. Err, when set, is one of the sentinels above. errors.Is
// matches both the Errno (errors.Is(err, syscall.EINVAL)) and Err.
type Error struct {
	Cmd    string        // "CREATE_QP", "MODIFY_QP", "MLX5_IB_METHOD_UAR_OBJ_ALLOC", ...
	Errno  syscall.Errno // what the kernel (or the daemon) returns
	Reason string        // the device's reason, for people
	Err    error         // a sentinel, or nil
}

func (e *Error) Error() string {
	s := "uverbs: " + e.Cmd + ": " + e.Errno.Error()
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns the errno and the sentinel.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Errno}
	}
	return []error{e.Errno, e.Err}
}

// ErrorOf is the *Error that command cmd fails with for err: err's own
// *Error; one made from a *FormatError or a bare syscall.Errno, with their
// errno; from a *TransitionError, EINVAL; nil for anything else.
func ErrorOf(cmd string, err error) *Error {
	var ue *Error
	if errors.As(err, &ue) {
		return ue
	}
	var fe *FormatError
	if errors.As(err, &fe) {
		return &Error{Cmd: cmd, Errno: fe.Errno, Reason: fe.Error(), Err: fe.Err}
	}
	var te *TransitionError
	if errors.As(err, &te) {
		return &Error{Cmd: cmd, Errno: syscall.EINVAL, Reason: te.Error(), Err: te.Err}
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return &Error{Cmd: cmd, Errno: en, Reason: err.Error()}
	}
	return nil
}

// Errorf is a shorthand for &Error{Cmd: cmd.String(), Errno: errno, Reason: reason}.
func (c Command) Errorf(errno syscall.Errno, reason string) *Error {
	return &Error{Cmd: c.String(), Errno: errno, Reason: reason}
}

// FormatError is bytes that do not decode: which struct, where, and a
// sentinel (ErrTruncated, ErrReserved, ErrShortBuffer, ErrBadLength,
// ErrBadAttr). Errno is what the kernel answers for the same bytes.
type FormatError struct {
	Struct string // C struct tag, e.g. "ib_uverbs_create_cq"
	Field  string // C member, or ""
	Offset int    // byte offset of the field, or the length that was short
	Need   int    // bytes needed (ErrTruncated, ErrShortBuffer), else 0
	Err    error
	Errno  syscall.Errno
}

func (e *FormatError) Error() string {
	s := "uverbs: " + e.Struct
	if e.Field != "" {
		s += "." + e.Field + " at offset " + strconv.Itoa(e.Offset)
	}
	s += ": " + e.Err.Error()
	if e.Need > 0 {
		s += " (need " + strconv.Itoa(e.Need) + " bytes, have " + strconv.Itoa(e.Offset) + ")"
	}
	return s
}

// Unwrap returns the sentinel and the errno.
func (e *FormatError) Unwrap() []error { return []error{e.Err, e.Errno} }

func shortBuffer(st string, need, have int) error {
	return &FormatError{Struct: st, Offset: have, Need: need, Err: ErrShortBuffer, Errno: syscall.ENOSPC}
}

// truncated input: the kernel answers ENOSPC for a request or a response
// buffer shorter than the core struct (uverbs_main.c, uverbs.md §3.1).
func truncated(st string, need, have int) error {
	return &FormatError{Struct: st, Offset: have, Need: need, Err: ErrTruncated, Errno: syscall.ENOSPC}
}

func reserved(st, field string, off int) error {
	return &FormatError{Struct: st, Field: field, Offset: off, Err: ErrReserved, Errno: syscall.EINVAL}
}

// nested reports a failure inside a nested struct with the outer name.
func nested(st, field string, off int, err error) error {
	var fe *FormatError
	if errors.As(err, &fe) {
		c := *fe
		c.Struct = st + "." + field + "(" + fe.Struct + ")"
		c.Offset += off
		return &c
	}
	return err
}
