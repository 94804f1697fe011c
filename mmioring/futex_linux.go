package mmioring

import (
	"syscall"
	"time"
	"unsafe"
)

// Shared (not FUTEX_PRIVATE_FLAG) futex operations: the word lives in a
// MAP_SHARED mapping that another process maps too, so the kernel must key
// the wait queue on the page, not on this process's address space.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr == val, for at most d. Wake-ups, EAGAIN
// (the word already changed), EINTR and ETIMEDOUT all return: the caller
// re-checks its condition and its deadline.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes up to n waiters on addr.
func futexWake(addr *uint32, n int) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(n), 0, 0, 0)
}
