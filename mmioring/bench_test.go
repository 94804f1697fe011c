package mmioring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// The benchmarks report ns/op = ns per record (per round trip for
// PingPong) and records/s; every one must show 0 allocs/op.
//
//	go test ./mmioring -run '^$' -bench . -benchtime 2000000x

func needProcs(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs GOMAXPROCS >= 2: one goroutine on each side")
	}
}

func reportRate(b *testing.B, start time.Time) {
	if el := time.Since(start); el > 0 {
		b.ReportMetric(float64(b.N)/el.Seconds(), "records/s")
	}
}

// benchStream pushes b.N records from a goroutine in batches of push and
// pops them in batches of pop (1: Push/Pop, else PushN/PopN).
func benchStream(b *testing.B, slots, push, pop int) {
	needProcs(b)
	_, p, c := newTestRing(b, anonMem, slots)
	recs := make([]Record, push)
	for i := range recs {
		recs[i] = genRecord(uint64(i)*6 + 1) // 8-byte doorbells
	}
	out := make([]Record, pop)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		far := time.Now().Add(time.Minute)
		for left := b.N; left > 0; {
			k := min(push, left)
			var err error
			if k == 1 {
				err = p.Push(&recs[0], far)
			} else {
				_, err = p.PushN(recs[:k], far)
			}
			if err != nil {
				errc <- err
				return
			}
			left -= k
		}
		errc <- nil
	}()
	far := time.Now().Add(time.Minute)
	for got := 0; got < b.N; {
		var n int
		var err error
		if pop == 1 {
			err, n = c.Pop(&out[0], far), 1
		} else {
			n, err = c.PopN(out, far)
		}
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	reportRate(b, start)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPushPop: single-record API on both sides, 8-byte doorbells.
func BenchmarkPushPop(b *testing.B) { benchStream(b, 1024, 1, 1) }

// BenchmarkBatch: PushN/PopN of 32 (one index store per batch per side).
func BenchmarkBatch(b *testing.B) {
	for _, k := range []int{8, 32} {
		b.Run(fmt.Sprint(k), func(b *testing.B) { benchStream(b, 1024, k, k) })
	}
}

// BenchmarkBlueFlameLines: 64-byte line records (two slots each), batches of 4.
func BenchmarkBlueFlameLines(b *testing.B) {
	needProcs(b)
	_, p, c := newTestRing(b, anonMem, 1024)
	recs := make([]Record, 4)
	for i := range recs {
		recs[i] = Line(0x1800+uint64(i)*64, lineData(uint64(i)), FullMask, 0)
	}
	out := make([]Record, 4)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() {
		far := time.Now().Add(time.Minute)
		for left := b.N; left > 0; left -= 4 {
			if _, err := p.PushN(recs[:min(4, left)], far); err != nil {
				return
			}
		}
	}()
	far := time.Now().Add(time.Minute)
	for got := 0; got < b.N; {
		n, err := c.PopN(out, far)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	reportRate(b, start)
}

// BenchmarkPingPong: one record there and one back through two rings;
// ns/op is the round trip (the ring's latency is half of it).
func BenchmarkPingPong(b *testing.B) {
	needProcs(b)
	_, p1, c1 := newTestRing(b, anonMem, 64)
	_, p2, c2 := newTestRing(b, anonMem, 64)
	if s := os.Getenv("SOFTNIC_RING_BENCH_SPIN"); s != "" {
		n, _ := strconv.Atoi(s)
		p1.Spin, c1.Spin, p2.Spin, c2.Spin = n, n, n, n
	}
	b.ReportAllocs()
	b.ResetTimer()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var r Record
		far := time.Now().Add(time.Minute)
		for range b.N {
			if c1.Pop(&r, far) != nil || p2.Push(&r, far) != nil {
				return
			}
		}
	}()
	rec := Store64(0x800, 1, 0)
	var r Record
	far := time.Now().Add(time.Minute)
	for i := range b.N {
		rec.Time = int64(i)
		if err := p1.Push(&rec, far); err != nil {
			b.Fatal(err)
		}
		if err := c2.Pop(&r, far); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

// BenchmarkCrossProcess: a child process produces b.N mixed records
// (genRecord) into a memfd ring in batches; this process consumes them.
// The timer starts at the first record, after the child's start-up.
func BenchmarkCrossProcess(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			cmd, c := crossRing(b, 1024, fmt.Sprintf("count:%d:%d", b.N, batch))
			out := make([]Record, max(batch, 1))
			far := time.Now().Add(time.Minute)
			n, err := c.PopN(out[:1], far)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for got := n; ; {
				n, err := c.PopN(out, far)
				if errors.Is(err, ErrClosed) {
					if got != b.N {
						b.Fatalf("%d records of %d", got, b.N)
					}
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
			reportRate(b, start)
			b.StopTimer()
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
