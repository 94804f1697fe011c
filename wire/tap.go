package wire

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/softnic/softnic/internal/tuntap"
)

// TAP is the tap:NAME transport: a Linux TAP interface opened with
// IFF_TAP|IFF_NO_PI, so one read or write is one whole Ethernet frame
// (without FCS). Frames written go up the host's stack on that interface
// (a bridge, a namespace, a VM's backend); frames the host sends out of the
// interface are read here. Opening it brings the interface up (IFF_UP).
// Needs CAP_NET_ADMIN unless the device is persistent and owned by the user.
type TAP struct {
	f     *os.File
	name  string
	q     *rxQueue
	stats realStats
	once  sync.Once
}

var _ RealTransport = (*TAP)(nil)

// OpenTAP attaches to (or creates) the TAP interface name, brings it up and
// starts the reader.
func OpenTAP(name string) (*TAP, error) {
	f, got, err := tuntap.OpenTAP(name)
	if err != nil {
		return nil, fmt.Errorf("wire: tap %q: %w", name, err)
	}
	if err := tuntap.SetUp(got); err != nil {
		f.Close()
		return nil, fmt.Errorf("wire: tap %q: %w", got, err)
	}
	waitRunning(got)
	t := &TAP{f: f, name: got}
	t.q = newRxQueue(DefaultQueueLen, &t.stats)
	t.q.done.Add(1)
	go t.read()
	return t, nil
}

// tapRunningWait bounds how long OpenTAP waits for the interface to become
// operational.
const tapRunningWait = 3 * time.Second

// waitRunning waits until name reports IFF_RUNNING. Attaching gives the TAP
// carrier, but the kernel applies carrier changes in its link-watch work,
// which runs at most once a second: until then the interface's queueing
// discipline is still noop and every frame the host sends into the TAP is
// dropped (counted as TX dropped on the interface). Waiting here keeps the
// first second of a run — when a peer's ARP requests arrive — from being
// lost. A device that never comes up is used anyway; frames then flow as
// soon as it does.
func waitRunning(name string) {
	deadline := time.Now().Add(tapRunningWait)
	for time.Now().Before(deadline) {
		if fl, err := tuntap.Flags(name); err != nil || fl&tuntap.FlagRunning != 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Name is the interface name the kernel gave the device.
func (t *TAP) Name() string { return t.name }

func (t *TAP) read() {
	defer t.q.done.Done()
	defer close(t.q.ch)
	buf := make([]byte, 65536)
	for {
		n, err := t.f.Read(buf)
		if err != nil {
			if errors.Is(err, fs.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return
			}
			// The device went away (EBADFD, EIO): count it and stop; the
			// closed channel tells the simulation's driver.
			t.stats.rxErrors.Add(1)
			return
		}
		if n < EthHeaderLen {
			t.stats.rxErrors.Add(1)
			continue
		}
		t.q.push(buf[:n])
	}
}

// Send writes one frame to the interface.
func (t *TAP) Send(frame []byte) error {
	if err := checkTx(frame, &t.stats); err != nil {
		return err
	}
	if _, err := t.f.Write(frame); err != nil {
		t.stats.txErrors.Add(1)
		return fmt.Errorf("wire: tap %s write: %w", t.name, err)
	}
	t.stats.txFrames.Add(1)
	t.stats.txBytes.Add(uint64(len(frame)))
	return nil
}

// Frames yields received frames.
func (t *TAP) Frames() <-chan []byte { return t.q.ch }

// Stats snapshots the counters.
func (t *TAP) Stats() RealStats { return t.stats.snapshot() }

// Close releases the device (a non-persistent one disappears) and waits for
// the reader to exit.
func (t *TAP) Close() error {
	var err error
	t.once.Do(func() {
		err = t.f.Close()
		t.q.done.Wait()
	})
	return err
}

func (t *TAP) String() string { return "tap:" + t.name }
