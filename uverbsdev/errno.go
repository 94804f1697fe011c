package uverbsdev

import (
	"errors"
	"syscall"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// Errno is the errno the kernel returns for a failed mlx5 command status
// (uverbs.StatusErrno, which has the table).
func Errno(s mlx5.CmdStatus) syscall.Errno { return uverbs.StatusErrno(s) }

// Refusal is the *uverbs.Error a client gets for err, an error of the
// device or of a decoder met while serving cmd: the errno of its command
// status (Errno), of a uverbs error, or EINVAL. The daemon answers its
// non-uverbs requests (events, CQ moderation) by the same table.
func Refusal(cmd string, err error) *uverbs.Error { return refusal(cmd, err) }

// refusal turns an error of the device or of a decoder into the
// *uverbs.Error the client gets.
func refusal(cmd string, err error) *uverbs.Error {
	var ce *mlx5.CmdError
	if errors.As(err, &ce) {
		return &uverbs.Error{Cmd: cmd, Errno: Errno(ce.Status), Reason: ce.Cmd + ": " + ce.Status.Error() + ": " + ce.Reason}
	}
	if ue := uverbs.ErrorOf(cmd, err); ue != nil {
		return ue
	}
	return &uverbs.Error{Cmd: cmd, Errno: syscall.EINVAL, Reason: err.Error()}
}

func fail(cmd string, errno syscall.Errno, reason string) *uverbs.Error {
	return &uverbs.Error{Cmd: cmd, Errno: errno, Reason: reason}
}

// maxErrno bounds the per-errno counters (Linux errnos are below 134).
const maxErrno = 134

// counters is a server's (or a device's) count of commands and refusals.
type counters struct {
	commands, refused uint64
	byErrno           [maxErrno]uint64
	byCmd             map[string]uint64
}

func (c *counters) count(e *uverbs.Error) {
	c.commands++
	if e == nil {
		return
	}
	c.refused++
	if int(e.Errno) < maxErrno {
		c.byErrno[e.Errno]++
	}
	if c.byCmd == nil {
		c.byCmd = map[string]uint64{}
	}
	if _, ok := c.byCmd[e.Cmd]; !ok && len(c.byCmd) >= maxCmdNames {
		// A client naming commands that do not exist (CMD_<n>,
		// IOCTL_<object>_<method>) would add a counter for each: the
		// ones past maxCmdNames are counted together.
		c.byCmd[otherCmds]++
		return
	}
	c.byCmd[e.Cmd]++
}

// maxCmdNames bounds the refused_cmd_ counters of one set, well above
// the commands the device serves; otherCmds counts the refusals past it.
const (
	maxCmdNames = 256
	otherCmds   = "OTHER"
)

// snapshot names the counters: "commands", "refused", "refused_errno_<E>"
// (EINVAL, ENOENT, ...) and "refused_cmd_<CMD>" (CREATE_QP, ...), the
// zero ones left out.
func (c *counters) snapshot() map[string]uint64 {
	m := map[string]uint64{"commands": c.commands, "refused": c.refused}
	for e, n := range c.byErrno {
		if n != 0 {
			m["refused_errno_"+errnoName(syscall.Errno(e))] = n
		}
	}
	for k, n := range c.byCmd {
		m["refused_cmd_"+k] = n
	}
	return m
}

var errnoNames = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EIO: "EIO", syscall.EBADF: "EBADF",
	syscall.EAGAIN: "EAGAIN", syscall.ENOMEM: "ENOMEM", syscall.EFAULT: "EFAULT", syscall.EBUSY: "EBUSY",
	syscall.EINVAL: "EINVAL", syscall.ENOSPC: "ENOSPC", syscall.ENOSYS: "ENOSYS", syscall.EOPNOTSUPP: "EOPNOTSUPP",
	syscall.EPROTONOSUPPORT: "EPROTONOSUPPORT", syscall.EEXIST: "EEXIST", syscall.E2BIG: "E2BIG",
	syscall.EHOSTUNREACH: "EHOSTUNREACH",
}

func errnoName(e syscall.Errno) string {
	if n, ok := errnoNames[e]; ok {
		return n
	}
	return "E" + itoa(int(e))
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
