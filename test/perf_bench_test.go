package test

import (
	"fmt"
	"hash/crc32"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// The benchmarks of issue 11 (docs/performance.md, docs/performance.sh).
// They use only the testbed and provider API that commit b152fe6 already
// had, so that the script can run this very file against that commit for
// the side-by-side ratios. ns/op is wall time; sim-ns/op is virtual time.

// BenchmarkE2EStream posts lists of 16 RDMA WRITEs (the last of each
// signaled) round-robin over 4 RC QPs, keeping up to 4 lists in flight per
// QP, so the model runs at the link's rate. One op is one WRITE.
func BenchmarkE2EStream(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) { benchStream(b, size) })
	}
}

func benchStream(b *testing.B, size int) {
	const nQP, list, inflight = 4, 16, 4
	cfg := testbed.DefaultConfig()
	cfg.MemSize = 64 << 20
	w, err := testbed.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	var reqs [nQP]*testbed.Endpoint
	var lists [nQP][]provider.SendWR
	for i := range reqs {
		eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 4096, BufSize: list * size, SQDepth: list * inflight, CQDepth: 256})
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = eps[0]
		for j := 0; j < list; j++ {
			wr := provider.SendWR{WRID: uint64(j), Opcode: provider.WRRDMAWrite,
				SGL:        []provider.SGE{eps[0].MR.SGE(uint64(j*size), uint32(size))},
				RemoteAddr: eps[1].MR.Addr + uint64(j*size), RKey: eps[1].MR.RKey}
			if j == list-1 {
				wr.Flags = provider.SendSignaled
			}
			lists[i] = append(lists[i], wr)
		}
	}
	var out [nQP]int
	wcs := make([]provider.WC, inflight)
	b.ReportAllocs()
	start, fired := w.Eng.Now(), w.Eng.Fired()
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for i := range reqs {
			for out[i] < inflight && posted < b.N {
				if _, err := reqs[i].QP.PostSend(lists[i]); err != nil {
					b.Fatal(err)
				}
				out[i]++
				posted += list
			}
		}
		for i := range reqs {
			if out[i] == 0 {
				continue
			}
			n, err := reqs[i].SendCQ.Poll(wcs)
			if err != nil {
				b.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if wc.Status != provider.WCSuccess {
					b.Fatal(wc.Status)
				}
			}
			out[i] -= n
			done += n * list
		}
	}
	b.StopTimer()
	sim := w.Eng.Now().Sub(start)
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "writes/s")
	b.ReportMetric(float64(sim)/1e3/float64(done), "sim-ns/op")
	b.ReportMetric(float64(sim)/1e12/b.Elapsed().Seconds(), "sim/wall")
	b.ReportMetric(float64(w.Eng.Fired()-fired)/float64(done), "events/op")
}

// BenchmarkE2EWrite1M posts one 1 MiB RDMA WRITE at a time (MTU 4096)
// and waits for its completion; MB/s is payload per second of wall time.
func BenchmarkE2EWrite1M(b *testing.B) {
	const size = 1 << 20
	cfg := testbed.DefaultConfig()
	cfg.MemSize = 8 << 20
	w, err := testbed.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 4096, BufSize: size})
	if err != nil {
		b.Fatal(err)
	}
	req, rsp := eps[0], eps[1]
	wrs := []provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		SGL: []provider.SGE{req.MR.SGE(0, size)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}}
	wcs := make([]provider.WC, 1)
	b.SetBytes(size)
	b.ReportAllocs()
	fired := w.Eng.Fired()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		postWait(b, req, wrs, wcs)
	}
	b.ReportMetric(float64(w.Eng.Fired()-fired)/float64(b.N), "events/op")
}

// postWait posts wrs on ep's QP and polls its send CQ until the one
// completion they ask for arrives, which must be a success.
func postWait(b *testing.B, ep *testbed.Endpoint, wrs []provider.SendWR, wcs []provider.WC) {
	if _, err := ep.QP.PostSend(wrs); err != nil {
		b.Fatal(err)
	}
	for {
		n, err := ep.SendCQ.Poll(wcs[:1])
		if err != nil {
			b.Fatal(err)
		}
		if n > 0 {
			break
		}
	}
	if wcs[0].Status != provider.WCSuccess {
		b.Fatal(wcs[0].Status)
	}
}

// BenchmarkE2ETrace is BenchmarkE2EWrite64's BlueFlame case with the
// trace recorder off and on.
func BenchmarkE2ETrace(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			cfg := testbed.DefaultConfig()
			cfg.Trace = on
			w, err := testbed.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			eps, err := w.ConnectRC(testbed.ConnOpts{})
			if err != nil {
				b.Fatal(err)
			}
			req, rsp := eps[0], eps[1]
			wrs := []provider.SendWR{{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}}
			wcs := make([]provider.WC, 1)
			post := func() { postWait(b, req, wrs, wcs) }
			// A recorder with a bounded ring is measured full, in its
			// steady state (an unbounded one has none).
			if r, ring := any(w.Rec).(interface{ Dropped() uint64 }); ring && on {
				for r.Dropped() == 0 {
					post()
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				post()
			}
			b.StopTimer()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		})
	}
}

// BenchmarkQPCreate creates qps RC QPs at the testbed's default caps (64
// send and receive WRs, 4 SGEs, 256 B inline) on one PD and one CQ, and
// reports the wall time per QP of the first and the last 1/64 of them, the
// Go heap per QP and the host memory (rings, doorbell records) per QP.
func BenchmarkQPCreate(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 16} {
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchQPCreate(b, n)
			}
		})
	}
}

func benchQPCreate(b *testing.B, n int) {
	b.StopTimer()
	cfg := testbed.DefaultConfig()
	// Host memory for the rings and doorbell records: 36 KiB a QP at
	// these caps (the SQ alone is 32 KiB, as libmlx5 sizes it).
	cfg.MemSize = n*40<<10 + 64<<20
	w, err := testbed.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	// Touch every page of host memory before the clock starts. The rings'
	// first touch (CreateQP zeroes them, as libmlx5 does) is a page fault,
	// and on a fresh VM one that the hypervisor must back too: 2-15 µs a
	// page here, varying tenfold with which guest page the kernel hands
	// out, so without this the last 1K QPs measured 3.3x the first on a VM
	// 20 minutes old (blocks of 1K from 32 to 157 µs a QP, no trend), and
	// 0.97x on one that had run for hours. Touched first, the same VM gave
	// 4-36 µs, 9 typical, no trend. The goal is about the model's cost of
	// a QP (issue 11: shm's first-fit scan), not the hypervisor's.
	mem := w.Hosts[0].Mem.Bytes()
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 0
	}
	ctx := w.Hosts[0].Ctx
	pd, err := ctx.AllocPD()
	if err != nil {
		b.Fatal(err)
	}
	cq, err := ctx.CreateCQ(256)
	if err != nil {
		b.Fatal(err)
	}
	qps := make([]*provider.QP, 0, n)
	attr := provider.QPInitAttr{Type: provider.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: provider.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256}}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	memBefore := w.Hosts[0].Mem.InUse()
	block := n / 64
	blocks := make([]time.Duration, 0, 64)
	var t0 time.Time
	b.StartTimer()
	for i := 0; i < n; i++ {
		if i%block == 0 {
			t0 = time.Now()
		}
		qp, err := ctx.CreateQP(pd, attr)
		if err != nil {
			b.Fatalf("QP %d: %v", i, err)
		}
		qps = append(qps, qp)
		if i%block == block-1 {
			blocks = append(blocks, time.Since(t0))
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/qp")
	b.ReportMetric(float64(w.Hosts[0].Mem.InUse()-memBefore)/float64(n), "host-B/qp")
	// The first and the last blocks of 1/64 each, as the median of the
	// first eight and of the last eight: one block is a few ms, the
	// length of a GC cycle of the heap the earlier blocks built or of a
	// scheduling hiccup, which landed in one block and not the other (the
	// ratio measured 1.2x one run, 2.1x the next).
	med8 := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return (s[3] + s[4]) / 2
	}
	first, last := med8(blocks[:8]), med8(blocks[len(blocks)-8:])
	b.ReportMetric(float64(first.Nanoseconds())/float64(block), "first-ns/qp")
	b.ReportMetric(float64(last.Nanoseconds())/float64(block), "last-ns/qp")
	// Destroying them, oldest first, the same way: each destroy gives
	// back a QP's rings and doorbell record to shm, whose free spans a
	// sorted slice once kept (every free moved the spans after it: 17 s
	// to destroy 64K QPs, the first 1K at 900 µs a QP).
	blocks = blocks[:0]
	for i, qp := range qps {
		if i%block == 0 {
			t0 = time.Now()
		}
		if err := qp.Destroy(); err != nil {
			b.Fatalf("destroy QP %d: %v", i, err)
		}
		if i%block == block-1 {
			blocks = append(blocks, time.Since(t0))
		}
	}
	first, last = med8(blocks[:8]), med8(blocks[len(blocks)-8:])
	b.ReportMetric(float64(first.Nanoseconds())/float64(block), "destroy-first-ns/qp")
	b.ReportMetric(float64(last.Nanoseconds())/float64(block), "destroy-last-ns/qp")
}

// BenchmarkAnchor is what the emulator's figures are set beside: a Go
// copy of 1 MiB and crc32 (IEEE) of 4 KiB.
func BenchmarkAnchor(b *testing.B) {
	b.Run("copy1M", func(b *testing.B) {
		src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
		b.SetBytes(1 << 20)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			copy(dst, src)
		}
	})
	// The same copy out of the caches: each op copies another 1 MiB of
	// 64 MiB to another 1 MiB of 64 MiB, twice the last-level cache of
	// this machine class (32 MiB), as a copy of data the program has not
	// just touched runs. Issue 11's 27 GB/s for its Go copy (and 0.06× for
	// b152fe6) matches this one, not the copy in cache above.
	b.Run("copy1M-cold", func(b *testing.B) {
		const n = 64
		src, dst := make([]byte, n<<20), make([]byte, n<<20)
		for i := range src {
			src[i], dst[i] = byte(i), byte(i>>8)
		}
		b.SetBytes(1 << 20)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := i % n
			copy(dst[k<<20:(k+1)<<20], src[(k*7%n)<<20:])
		}
	})
	b.Run("crc32-4K", func(b *testing.B) {
		p := make([]byte, 4096)
		b.SetBytes(4096)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			crc32.ChecksumIEEE(p)
		}
	})
}
