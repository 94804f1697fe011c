package serve_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/softnic/softnic/mmioring"
	"github.com/stretchr/testify/require"
)

// TestBadInputLogBounded: a client writing malformed ring records as fast
// as the ring takes them made the daemon log one line for each, half a
// million lines (67 MB) a second on one core; malformed socket messages
// the same at their rate. They are counted, every one, but each client's
// are logged only for the first few, and its detach line says how many
// there were.
func TestBadInputLogBounded(t *testing.T) {
	d, sock, log := startDaemon(t, 1, nil)
	r := dialRaw(t, sock, "softnic0", 0x10000000)
	b := r.rmem.Bytes()
	prod := (*uint32)(unsafe.Pointer(&b[128]))
	cons := (*uint32)(unsafe.Pointer(&b[256]))
	sleeping := (*uint32)(unsafe.Pointer(&b[132])) // the consumer's futex word
	const records = 5000
	pos := atomic.LoadUint32(prod)
	deadline := time.Now().Add(10 * time.Second)
	for sent := 0; sent < records; {
		require.True(t, time.Now().Before(deadline), "the daemon takes the records")
		for ; sent < records && pos-atomic.LoadUint32(cons) < 64; sent++ {
			s := b[mmioring.HeaderSize+int(pos%64)*mmioring.SlotSize:]
			putU32(s, pos)
			s[4] = 3 // a width no record has
			pos++
		}
		atomic.StoreUint32(prod, pos)
		// Wake the daemon as a producer does (mmioring doc.go, rule 5):
		// without it each batch waited out the daemon's ring nap (200
		// ms) whenever the daemon had gone to sleep before it, and a
		// loaded machine missed the deadline.
		if atomic.SwapUint32(sleeping, 0) != 0 {
			syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(sleeping)), 1 /* FUTEX_WAKE */, 1, 0, 0, 0)
		}
	}
	const messages = 100
	for i := 0; i < messages; i++ {
		require.NoError(t, r.uc.SetDeadline(time.Now().Add(2*time.Second)))
		_, err := r.uc.Write([]byte("not a message at all"))
		require.NoError(t, err)
		_, _, _, err = r.conn.Recv()
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return d.Counters().BadRecords == records }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, uint64(messages), d.Counters().BadMessages)
	alive(t, r)
	r.conn.Close()
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "detach softnic0") }, 5*time.Second, 10*time.Millisecond)
	lines := strings.Split(log.String(), "\n")
	bad := 0
	for _, l := range lines {
		if strings.Contains(l, "bad MMIO record") || strings.Contains(l, "bad message") {
			bad++
		}
	}
	require.LessOrEqual(t, bad, 32, "bad input logged line by line")
	require.Contains(t, log.String(), "counted, no longer logged")
	require.Contains(t, log.String(), "5100 bad records and messages")
}

// TestRefusalLogBounded: a client reconnecting in a loop with a bad
// ATTACH logged one line for each refusal. Every refusal is counted; at
// most maxRefusalLogs (16) a second are logged, and one line says how many
// were not.
func TestRefusalLogBounded(t *testing.T) {
	d, sock, log := startDaemon(t, 1, nil)
	const tries = 200
	for i := 0; i < tries; i++ {
		c, err := net.Dial("unixpacket", sock)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		_, err = c.Write([]byte("not an ATTACH at all"))
		require.NoError(t, err)
		_, err = io.ReadAll(c) // the daemon answers with an error and hangs up
		require.NoError(t, err)
		c.Close()
	}
	require.Eventually(t, func() bool { return d.Counters().Refusals == tries }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, d.Close())
	refused, summed := 0, uint64(0)
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "refused pid") {
			refused++
		}
		var n uint64
		if _, err := fmt.Sscanf(l, "softnic serve: %d more refusals not logged", &n); err == nil {
			summed += n
		}
	}
	require.GreaterOrEqual(t, refused, 1, "refusals are still logged")
	require.Less(t, refused, tries, "one line per refusal")
	require.Equal(t, uint64(tries), uint64(refused)+summed, "every refusal logged or summed up:\n%s", log.String())
}
