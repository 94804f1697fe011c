package wallclock

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/trace"
	"github.com/softnic/softnic/wire"
)

// storm keeps an engine busier than real time: an event every
// nanosecond of virtual time, each scheduling the next.
type storm struct{ eng *sim.Engine }

func (s *storm) Fire(sim.Time) { s.eng.After(sim.Nanosecond, s) }

// behind waits (at most 2 s) until the pacer's wall clock is lag ahead of
// its idle engine.
func behind(t *testing.T, p *Pacer, lag sim.Duration) {
	t.Helper()
	for end := time.Now().Add(2 * time.Second); p.Wall() < p.Engine().Now().Add(lag); {
		require.True(t, time.Now().Before(end), "the wall clock does not move")
		time.Sleep(100 * time.Microsecond)
	}
}

// TestCatchUpBounded: an engine with more work than it runs in real time
// is caught up a bounded number of events at a time by whoever holds the
// lock. Sync ran it all the way to the wall clock, and with the engine
// falling further behind the longer it ran, a daemon's lock holders (and
// its pump) held the world for hundreds of milliseconds at every turn
// until its clients' calls missed their deadlines and took it for dead.
// An idle engine still goes straight to the wall clock.
func TestCatchUpBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		storm  bool
		run    func(p *Pacer)
		most   uint64 // events it may run
		atWall bool   // the engine reaches the wall clock as of the call
	}{
		{"SyncAtMost", true, func(p *Pacer) { p.SyncAtMost(100) }, 100, false},
		{"SyncAtMost none", true, func(p *Pacer) { p.SyncAtMost(0) }, 0, false},
		{"Pump", true, func(p *Pacer) { p.Pump(0, drainMax) }, SyncBudget + drainMax, false},
		{"SyncAtMost idle", false, func(p *Pacer) { p.SyncAtMost(100) }, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := sim.NewEngine()
			var mu sync.Mutex
			p := NewPacer(eng, DefaultLead)
			p.SetLocker(&mu)
			if tc.storm {
				eng.At(0, &storm{eng})
			}
			behind(t, p, sim.Duration(2*sim.Millisecond)) // 2e6 events due
			w := p.Wall()
			before := eng.Fired()
			tc.run(p)
			ran := eng.Fired() - before
			require.LessOrEqual(t, ran, tc.most, "events run in one call")
			if tc.storm {
				require.Less(t, eng.Now(), w, "the engine lags the wall clock")
			}
			if tc.atWall {
				require.GreaterOrEqual(t, eng.Now(), w)
			}
		})
	}
}

// logTransport is a RealTransport whose received frames the test queues
// and whose sends go into a log shared with the test's timers.
type logTransport struct {
	rx  chan []byte
	log *[]string
}

func (l *logTransport) Send([]byte) error     { *l.log = append(*l.log, "sent"); return nil }
func (l *logTransport) Frames() <-chan []byte { return l.rx }
func (l *logTransport) Stats() wire.RealStats { return wire.RealStats{} }
func (l *logTransport) Close() error          { return nil }
func (l *logTransport) String() string        { return "log" }

type logTimer struct{ log *[]string }

func (l logTimer) Fire(sim.Time) { *l.log = append(*l.log, "timer") }

// TestSyncDeliversQueuedFramesFirst: a frame that arrived while nobody
// pumped is older than the timers that fell due meanwhile, so Sync (the
// catch-up before a post) hands it to the port before it runs them, as
// Pump does. Sync ran the timers first: an ACK sitting in the socket lost
// to the ACK timeout that its arrival would have stopped.
func TestSyncDeliversQueuedFramesFirst(t *testing.T) {
	var log []string
	eng := sim.NewEngine()
	p := NewPacer(eng, DefaultLead)
	tr := &logTransport{rx: make(chan []byte, 1), log: &log}
	ourIP, peerIP := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	ourMAC, peerMAC := ethport.DefaultMAC(ourIP), ethport.DefaultMAC(peerIP)
	port, err := ethport.New(eng, ethport.Config{MAC: ourMAC, IP: ourIP}, tr, trace.NewRecorder())
	require.NoError(t, err)
	p.AddPort(port, tr)
	// The who-has is queued; a timer falls due 1 ms later; the program
	// looks 3 ms later.
	frame := make([]byte, ethport.ARPFrameLen)
	ethport.BuildARPFrame(frame, ethport.Broadcast, peerMAC, &ethport.ARPFields{Op: ethport.ARPRequest,
		SenderMAC: peerMAC, SenderIP: peerIP, TargetIP: ourIP})
	tr.rx <- frame
	eng.At(eng.Now().Add(sim.Millisecond), logTimer{&log})
	behind(t, p, 3*sim.Millisecond)
	p.Sync()
	require.Equal(t, []string{"sent", "timer"}, log, "the queued who-has is answered before the later timer runs")
}
