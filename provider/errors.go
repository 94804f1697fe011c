package provider

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// Sentinel errors (test with errors.Is). Every error the provider returns
// wraps one of these. A refusal of the device's control interface also
// wraps its *mlx5.CmdError, whose status errors.Is can match (e.g.
// errors.Is(err, mlx5.StatusBadParam)); the sentinel is the one of the
// errno the kernel returns for that status (ErrnoSentinel), as over uverbs.
var (
	ErrInvalidArg    = errors.New("invalid argument")
	ErrNotSupported  = errors.New("not supported")
	ErrQueueFull     = errors.New("work queue full")
	ErrTooManySGE    = errors.New("too many scatter/gather entries")
	ErrInlineTooBig  = errors.New("inline data exceeds max_inline_data")
	ErrBadState      = errors.New("operation not allowed in the QP state")
	ErrInvalidAttr   = errors.New("invalid or missing QP attribute")
	ErrBadTransition = errors.New("QP state transition not allowed")
	ErrClosed        = errors.New("object closed or destroyed")
	ErrNoMemory      = errors.New("no host memory")
	ErrBusy          = errors.New("resource still in use")
	ErrOutOfRange    = errors.New("address range outside host memory")
	ErrBadCQE        = errors.New("malformed or unexpected CQE")
	// ErrLocalLength rejects a post whose lengths the device could only
	// answer with LOC_LEN_ERR, or would misread: an SGE of 2^31 bytes or
	// more (bit 31 of a data segment's byte_count marks an inline
	// segment), or a send larger than the device's max message size. It is
	// always returned together with ErrInvalidArg (both match errors.Is).
	ErrLocalLength = errors.New("local length error")
)

// OpError is an error from one verb: which operation, on which QP (0 when
// there is none: the CQ, SRQ, PD, MR, channel and context verbs, whose
// message names their object; for poll_cq the QP the failing CQE names),
// and for post operations the index of the offending work request in the
// list (-1 otherwise).
type OpError struct {
	Op    string
	QPN   uint32
	Index int
	Err   error
}

// Error reports the verb, the QPN and WQE index when there are ones, and
// the cause.
func (e *OpError) Error() string {
	switch {
	case e.Index >= 0:
		return fmt.Sprintf("provider: %s qpn %#x wr %d: %v", e.Op, e.QPN, e.Index, e.Err)
	case e.QPN != 0:
		return fmt.Sprintf("provider: %s qpn %#x: %v", e.Op, e.QPN, e.Err)
	default:
		return fmt.Sprintf("provider: %s: %v", e.Op, e.Err)
	}
}

// Unwrap returns the underlying error.
func (e *OpError) Unwrap() error { return e.Err }

// opErr builds an OpError for an operation that is not a post, with a
// control-plane refusal given its sentinel (withSentinel).
func opErr(op string, qpn uint32, err error) error {
	return &OpError{Op: op, QPN: qpn, Index: -1, Err: withSentinel(err)}
}

// withSentinel makes a command status of the device's control interface
// (*mlx5.CmdError) match, besides its status, the sentinel of the errno
// the kernel returns for it (uverbs.StatusErrno, ErrnoSentinel): the
// sentinel the same refusal matches when it comes over uverbs bytes
// (UverbsControl), so that an errors.Is check does not depend on the
// backend. The message is the command error's.
func withSentinel(err error) error {
	var ce *mlx5.CmdError
	if !errors.As(err, &ce) {
		return err
	}
	errno := uverbs.StatusErrno(ce.Status)
	if errno == 0 {
		return err
	}
	return &statusError{sentinel: ErrnoSentinel(ce.Cmd, errno), err: err}
}

// statusError is a control-plane error that also matches a sentinel.
type statusError struct {
	sentinel error
	err      error
}

func (e *statusError) Error() string   { return e.err.Error() }
func (e *statusError) Unwrap() []error { return []error{e.sentinel, e.err} }

// detail wraps a sentinel with a reason.
func detail(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

// detailBoth wraps two sentinels (both match errors.Is) with a reason.
func detailBoth(a, b error, format string, args ...any) error {
	return fmt.Errorf("%w: %w: "+format, append([]any{a, b}, args...)...)
}

// ErrDeviceGone is a device that went away under an open context: the
// softnic daemon serving it died or closed the connection (provider.Dial),
// or a kernel device was removed. Every later call fails with it.
var ErrDeviceGone = errors.New("device gone")
