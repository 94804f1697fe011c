package provider

import (
	"testing"
)

// BenchmarkPostSend posts one 64-byte RDMA WRITE with one SGE per call,
// through the BlueFlame path and the doorbell path. The fake device does
// not record, and the SQ is retired after each post as if a completion had
// been polled, so only PostSend is measured.
func BenchmarkPostSend(b *testing.B) {
	for _, bc := range []struct {
		name string
		bf   bool
	}{{"bf", true}, {"doorbell", false}} {
		b.Run(bc.name, func(b *testing.B) {
			e := NewEnv(b, EnvOpts{Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1}})
			ToRTS(b, e.QP)
			e.Dev.RecordOps = false
			e.QP.SetBlueFlame(bc.bf)
			wrs := []SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{e.MR.SGE(0, 64)},
				RemoteAddr: 0x1000, RKey: 7}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := e.QP.PostSend(wrs); err != nil {
					b.Fatal(err)
				}
				e.QP.sq.tail = e.QP.sq.head
			}
		})
	}
}

// BenchmarkPostSendPoll is the whole post/poll cycle against the fake
// device's engine (which runs inside Poll).
func BenchmarkPostSendPoll(b *testing.B) {
	e := NewEnv(b, EnvOpts{Progress: true, Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1}})
	ToRTS(b, e.QP)
	e.Dev.RecordOps = false
	wrs := []SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{e.MR.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 7}}
	var wc [4]WC
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.QP.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		if n, err := e.CQ.Poll(wc[:]); n != 1 || err != nil {
			b.Fatal(n, err)
		}
	}
}

// TestPostSendDoesNotAllocate pins the 0-allocation property in the
// ordinary test run.
func TestPostSendDoesNotAllocate(t *testing.T) {
	e := NewEnv(t, EnvOpts{Progress: true})
	ToRTS(t, e.QP)
	e.Dev.RecordOps = false
	wrs := []SendWR{{Opcode: WRRDMAWrite, SGL: []SGE{e.MR.SGE(0, 64)}}, {Opcode: WRSend, Flags: SendInline | SendSignaled,
		SGL: []SGE{e.MR.SGE(0, 100)}}}
	for _, n := range []int{1, 2} {
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := e.QP.PostSend(wrs[:n]); err != nil {
				t.Fatal(err)
			}
			e.QP.sq.tail = e.QP.sq.head
		})
		if allocs != 0 {
			t.Fatalf("PostSend of %d WRs: %v allocations", n, allocs)
		}
	}
}
