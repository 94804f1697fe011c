package mmioring_test

import (
	"fmt"
	"syscall"
	"time"

	"github.com/softnic/softnic/mmioring"
)

// A 128-byte WQE copied to BlueFlame buffer 0 of UAR page 1 (BAR0 0x1800),
// as the host side's write-combining buffer emits it: two full lines, the
// second carrying the flush; then a plain doorbell.
func Example_blueFlame() {
	mem, err := syscall.Mmap(-1, 0, mmioring.Size(64), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
	if err != nil {
		panic(err)
	}
	defer syscall.Munmap(mem)

	// Client side: make the ring in the memfd it shares with the daemon.
	ring, err := mmioring.Init(mem, 64)
	if err != nil {
		panic(err)
	}
	var wqe [2][64]byte
	wqe[0][0] = 0x0a    // whatever the WQE holds
	const t = 1_000_000 // host virtual time, ps
	lines := []mmioring.Record{
		mmioring.Line(0x1800, &wqe[0], mmioring.FullMask, t),
		mmioring.Line(0x1840, &wqe[1], mmioring.FullMask, t),
		mmioring.Store64(0x1800, 0x0000010000000008, t+5000),
	}
	lines[1].Flags = mmioring.FlagFlush
	if _, err := ring.Producer().PushN(lines, time.Now().Add(time.Second)); err != nil {
		panic(err)
	}

	// Daemon side: attach (checking everything) and pop.
	dev, err := mmioring.Attach(mem)
	if err != nil {
		panic(err)
	}
	var out [4]mmioring.Record
	n, err := dev.Consumer().PopN(out[:], time.Now().Add(time.Second))
	if err != nil {
		panic(err)
	}
	for _, r := range out[:n] {
		fmt.Printf("t=%d off=%#x width=%d flush=%v slots=%d\n", r.Time, r.Off, r.Width, r.Flags&mmioring.FlagFlush != 0, r.Slots())
	}
	// Output:
	// t=1000000 off=0x1800 width=64 flush=false slots=2
	// t=1000000 off=0x1840 width=64 flush=true slots=2
	// t=1005000 off=0x1800 width=8 flush=false slots=1
}
