//go:build !linux

package mmioring

import (
	"sync/atomic"
	"time"
)

// Without futexes the sleep is a short nap, re-checked: correct, slower.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	if atomic.LoadUint32(addr) == val {
		time.Sleep(min(d, 50*time.Microsecond))
	}
}

func futexWake(*uint32, int) {}
