package device_test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// rawOps are the send opcodes a raw WQE draws from (r[1] < 0x80); with
// bit 7 set r[1]&0x7f is written as the opcode byte itself.
var rawOps = []mlx5.Opcode{mlx5.OpNOP, mlx5.OpRDMAWrite, mlx5.OpRDMAWriteImm, mlx5.OpSend, mlx5.OpSendImm,
	mlx5.OpRDMARead, mlx5.OpAtomicCS, mlx5.OpAtomicFA, mlx5.OpSendInval, mlx5.OpAtomicMFA, mlx5.OpUMR}

// rawSQ drives one QP's send queue by hand: WQE bytes straight into the
// ring, its doorbell record, 8-byte doorbells and BlueFlame lines on its
// bfreg, as a buggy or hostile driver would, bypassing the provider.
type rawSQ struct {
	w        *testbed.World
	ep, peer *testbed.Endpoint
	other    *provider.MR // an MR of another PD on the same device
	pi       uint16       // the hand-driven producer counter
	bf       int          // BlueFlame half in use
	av       []byte       // UD: the datagram segment of a WQE the provider built
}

func (r *rawSQ) info() provider.SQInfo { return r.ep.QP.SQInfo() }

// put writes b at WQEBB counter pi, wrapping at the ring's end.
func (r *rawSQ) put(pi uint16, b []byte) {
	in := r.info()
	for i := 0; i < len(b); i += mlx5.WQEBBSize {
		slot := (int(pi) + i/mlx5.WQEBBSize) & (in.WQEBBs - 1)
		_ = r.ep.Host.Mem.Write(in.Addr+uint64(slot*mlx5.WQEBBSize), b[i:min(i+mlx5.WQEBBSize, len(b))])
	}
}

func (r *rawSQ) record(word int, v uint32) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	_ = r.ep.Host.Mem.Write(r.info().DBRAddr+uint64(4*word), b[:])
}

func (r *rawSQ) doorbell(db []byte) {
	in := r.info()
	r.ep.Host.CPU.Store64(in.BFRegOffset+uint64(r.bf), binary.LittleEndian.Uint64(db[:8]))
	r.ep.Host.CPU.Flush()
	r.bf ^= in.BFBufSize
}

// blueFlame copies b (padded to whole lines, cut at the BF buffer) as
// 64-byte lines of 8-byte stores.
func (r *rawSQ) blueFlame(b []byte) {
	in := r.info()
	n := min((len(b)+63)&^63, max(in.BFBufSize, 64))
	line := make([]byte, n)
	copy(line, b)
	for i := 0; i < n; i += 8 {
		r.ep.Host.CPU.Store64(in.BFRegOffset+uint64(r.bf+i), binary.LittleEndian.Uint64(line[i:]))
	}
	r.ep.Host.CPU.Flush()
	r.bf ^= in.BFBufSize
}

// build makes one WQE from a 16-byte recipe r:
//
//	r[1] opcode (rawOps index, or a raw byte with bit 7)
//	r[2] DS: 0 the natural one, else r[2]&0x3f
//	r[3] fm_ce_se
//	r[4] added to wqe_index (0: the right one)
//	r[5] XORed into the QPN
//	r[6] [2:0] SGE count (0..7), bit 7 inline
//	r[7] lkey: 0 the MR's, 1 another PD's, 2 the terminator 0x100, 3 r[7]<<8
//	r[8:10] length (big-endian), r[10] local offset / 64
//	r[11] remote offset / 64, r[12] rkey: 0 the peer's, else r[12]<<8
func (r *rawSQ) build(rc []byte) []byte {
	op := rawOps[int(rc[1])%len(rawOps)]
	if rc[1]&0x80 != 0 {
		op = mlx5.Opcode(rc[1] & 0x7f)
	}
	var segs []byte
	seg := func() []byte { segs = append(segs, make([]byte, 16)...); return segs[len(segs)-16:] }
	if r.av != nil {
		segs = append(segs, r.av...)
		if rc[15]&0x80 != 0 { // a lying destination: QPN, GID
			binary.BigEndian.PutUint32(segs[8:], 0x80000000|uint32(rc[11])<<16|uint32(rc[12]))
			segs[0x20+int(rc[12]&15)] ^= rc[11]
		}
	}
	rkey := r.peer.MR.RKey
	if rc[12] != 0 {
		rkey = uint32(rc[12]) << 8
	}
	switch op {
	case mlx5.OpRDMAWrite, mlx5.OpRDMAWriteImm, mlx5.OpRDMARead, mlx5.OpAtomicCS, mlx5.OpAtomicFA, mlx5.OpAtomicMFA:
		mlx5.RaddrSeg(seg()).Encode(&mlx5.RaddrFields{RAddr: r.peer.MR.Addr + uint64(rc[11])*64, RKey: rkey})
		if op == mlx5.OpAtomicCS || op == mlx5.OpAtomicFA || op == mlx5.OpAtomicMFA {
			binary.BigEndian.PutUint64(seg(), 1)
		}
	}
	n := uint32(binary.BigEndian.Uint16(rc[8:10]))
	if rc[6]&0x80 != 0 {
		in := make([]byte, mlx5.InlineSegSize(int(n)))
		mlx5.InlineSeg(in).SetLen(n)
		segs = append(segs, in...)
	} else {
		for i := 0; i < int(rc[6]&7); i++ {
			key := r.ep.MR.LKey
			switch rc[7] & 3 {
			case 1:
				key = r.other.LKey
			case 2:
				key = mlx5.InvalidKey
			case 3:
				key = uint32(rc[7]) << 8
			}
			mlx5.DataSeg(seg()).Encode(&mlx5.DataFields{ByteCount: n, LKey: key, Addr: r.ep.MR.Addr + uint64(rc[10])*64})
		}
	}
	ds := uint8(1 + len(segs)/16)
	if rc[2] != 0 {
		ds = rc[2] & 0x3f
	}
	b := make([]byte, 16+len(segs))
	mlx5.CtrlSeg(b).Encode(&mlx5.CtrlFields{Opcode: op, WQEIndex: r.pi + uint16(rc[4]), QPN: r.ep.QP.QPN() ^ uint32(rc[5]), DS: ds, FMCESE: rc[3]})
	copy(b[16:], segs)
	return b
}

// FuzzRawSQ aims hand-written send WQEs and hostile doorbells at a live
// RC QP in checked mode: bad opcodes and DS, wrong QPN and wqe_index,
// keys of another PD, lengths up to 64 KiB, inline headers that lie,
// doorbells and BlueFlame writes whose counters run ahead or behind the
// ring, doorbell records that move backwards, on an RC, UC or UD QP (the
// first record's r[15]%3; a UD WQE carries the datagram segment of one
// the provider built, its destination QPN and GID perturbed when r[15]
// has bit 7). Each 16-byte record is one
// step (r[0]%4): 0 a WQE at the producer (rawSQ.build), announced by
// r[13]%3 (doorbell, BlueFlame, nothing) with the record set by r[14]
// (0 exact, else the producer + int8(r[14])); 1 an 8-byte doorbell of
// r[1:9], QPN patched in when r[9] is even; 2 the send or receive record
// (r[1]&1) set to r[2:6]; 3 run the engine r[1] events. The device must
// not panic, must write nothing outside registered memory, and must not
// be left wedged: the raw QP ends in RTS or ERR, and a fresh connection
// on the same two devices still completes a WRITE.
func FuzzRawSQ(f *testing.F) {
	rec := func(b ...byte) []byte { r := make([]byte, 16); copy(r, b); return r }
	cat := func(rs ...[]byte) []byte {
		var o []byte
		for _, r := range rs {
			o = append(o, r...)
		}
		return o
	}
	f.Add(cat(rec(0, 1, 0, 8, 0, 0, 1, 0, 0, 64)))                                                // a good WRITE
	f.Add(cat(rec(0, 0xf7, 0, 8), rec(0, 1, 0, 8, 0, 0, 1, 0, 0, 64)))                            // bad opcode, then a WRITE (flushed)
	f.Add(cat(rec(0, 1, 0, 8, 0, 0, 1, 1, 0, 64)))                                                // another PD's lkey
	f.Add(cat(rec(0, 1, 0, 8, 0, 0, 0x80, 0, 0x03, 0x90)))                                        // inline larger than max_inline
	f.Add(cat(rec(0, 3, 0, 8, 0, 0, 1, 0, 0, 64, 0, 0, 0, 1)))                                    // SEND by BlueFlame
	f.Add(cat(rec(0, 1, 0, 8, 0, 0, 1, 0, 0, 64, 0, 0, 0, 0, 0x7f)))                              // record far ahead
	f.Add(cat(rec(0, 1, 0, 8, 0, 0, 1, 0, 0, 64, 0, 0, 0, 2), rec(0, 1, 0, 8, 0, 0, 1, 0, 0, 8))) // batch of two
	f.Add(cat(rec(1, 0, 0x40, 0, 0x08, 0, 0, 0, 3, 0), rec(3, 50)))                               // doorbell far ahead
	f.Add(cat(rec(0, 6, 0, 8, 0, 0, 1, 0, 0, 8), rec(0, 5, 0, 8, 0, 0, 1, 0, 0x10, 0)))           // atomic, READ of 4 KiB
	f.Add(cat(rec(2, 1, 0xff, 0xff, 0, 0), rec(0, 1, 0, 8, 0, 5, 1)))                             // RQ record wild, wrong QPN
	f.Add(cat(rec(0, 3, 0, 8, 0, 0, 1, 0, 0, 64, 0, 0, 0, 0, 0, 2)))                              // UD SEND
	f.Add(cat(rec(0, 3, 0, 8, 0, 0, 1, 0, 0x10, 0, 0, 0, 0, 1, 0, 0x82)))                         // UD SEND over the MTU, lying AV, by BlueFlame
	f.Add(cat(rec(0, 5, 0, 8, 0, 0, 1, 0, 0, 64, 0, 0, 0, 0, 0, 1)))                              // READ on UC
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 16*64 {
			return
		}
		cfg := testbed.DefaultConfig()
		cfg.Check = true
		w, err := testbed.New(cfg)
		if err != nil {
			t.Fatal(err) // the default world always builds: a failure here is a bug, not bad input
		}
		defer w.Close()
		all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead | provider.AccessRemoteAtomic
		opts := testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10, SQDepth: 16, Access: all, Timeout: 2, RetryCnt: 2, MinRNR: 1, RNRRetry: 2}
		if len(data) >= 16 {
			opts.Type = [...]provider.QPType{provider.QPTypeRC, provider.QPTypeUC, provider.QPTypeUD}[data[15]%3]
		}
		eps, err := w.ConnectRC(opts)
		if err != nil {
			t.Fatal(err)
		}
		req, rsp := eps[0], eps[1]
		other := foreignMR(t, req, all)
		g := newGuards(t, eps)
		for i := 0; i < 8; i++ {
			_, _ = rsp.QP.PostRecv([]provider.RecvWR{{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*8192, 8192)}}})
		}
		// One WQE the provider builds and completes: the hand-driven
		// producer starts after it, and a UD QP takes its datagram segment.
		first := provider.SendWR{WRID: 1, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(0, 64)}, RemoteAddr: rsp.MR.Addr, RKey: rsp.MR.RKey}
		if opts.Type == provider.QPTypeUD {
			first = provider.SendWR{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled,
				SGL: []provider.SGE{req.MR.SGE(0, 64)}, AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: rsp.QKey}
		}
		if _, err := req.QP.PostSend([]provider.SendWR{first}); err != nil {
			t.Fatal(err)
		}
		if _, err := testbed.Wait(req.SendCQ, 1); err != nil {
			t.Fatal(err)
		}
		r := &rawSQ{w: w, ep: req, peer: rsp, other: other, pi: req.QP.SQProducer(), bf: req.QP.SQInfo().BFOffset}
		if opts.Type == provider.QPTypeUD {
			wqe, err := req.QP.WQE(0)
			if err != nil {
				t.Fatal(err)
			}
			r.av = wqe[16 : 16+48]
		}
		for ; len(data) >= 16; data = data[16:] {
			rc := data[:16]
			switch rc[0] % 4 {
			case 0:
				b := r.build(rc)
				r.put(r.pi, b)
				bbs := max(1, mlx5.WQEBBs(int(b[7]&0x3f)))
				r.pi += uint16(bbs)
				rv := r.pi
				if rc[14] != 0 {
					rv = r.pi + uint16(int8(rc[14]))
				}
				r.record(mlx5.DBRSend, uint32(rv))
				switch rc[13] % 3 {
				case 0:
					r.doorbell(b)
				case 1:
					r.blueFlame(b)
				}
			case 1:
				db := append([]byte(nil), rc[1:9]...)
				if rc[9]%2 == 0 {
					q := req.QP.QPN()
					db[4], db[5], db[6] = byte(q>>16), byte(q>>8), byte(q)
				}
				r.doorbell(db)
			case 2:
				word := mlx5.DBRSend
				if rc[1]&1 != 0 {
					word = mlx5.DBRRecv
				}
				r.record(word, binary.BigEndian.Uint32(rc[2:6]))
			case 3:
				w.Eng.Run(int(rc[1]))
			}
		}
		w.Settle(1 << 20)
		g.check(t)
		if st, err := req.QP.QueryState(); err != nil || st != provider.QPStateRTS && st != provider.QPStateErr && st != provider.QPStateSQE {
			t.Fatalf("raw QP in %v (%v)", st, err)
		}
		// The devices still work: a fresh connection completes a WRITE.
		opts.SQDepth, opts.Type = 0, provider.QPTypeRC
		fresh, err := w.ConnectRC(opts)
		if err != nil {
			t.Fatal(err)
		}
		a, b := fresh[0], fresh[1]
		if _, err := a.QP.PostSend([]provider.SendWR{{WRID: 9, Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
			SGL: []provider.SGE{a.MR.SGE(0, 64)}, RemoteAddr: b.MR.Addr, RKey: b.MR.RKey}}); err != nil {
			t.Fatal(err)
		}
		wcs, err := testbed.Wait(a.SendCQ, 1)
		if err != nil || wcs[0].Status != provider.WCSuccess {
			t.Fatalf("probe WRITE on a fresh QP: %v %v", wcs, err)
		}
	})
}

// foreignMR registers a 4 KiB MR of a second PD on ep's context: a key a
// hand-written WQE may name that its QP's PD does not own.
func foreignMR(t *testing.T, ep *testbed.Endpoint, access provider.Access) *provider.MR {
	t.Helper()
	pd2, err := ep.Host.Ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	ob, err := ep.Host.Ctx.AllocBuffer(4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd2.RegMR(ob.Addr, uint64(len(ob.Bytes)), access)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// guards are an 8 KiB buffer on each node that no WQE points at, filled
// with a pattern: whatever a fuzz input makes the devices do, they must
// not write there.
type guards struct {
	buf  [2]provider.Buffer
	want [2][]byte
}

func newGuards(t *testing.T, eps [2]*testbed.Endpoint) *guards {
	t.Helper()
	g := &guards{}
	for i, e := range eps {
		var err error
		if g.buf[i], err = e.Host.Ctx.AllocBuffer(8192, 4096); err != nil {
			t.Fatal(err)
		}
		for k := range g.buf[i].Bytes {
			g.buf[i].Bytes[k] = byte(k*7 + i)
		}
		g.want[i] = append([]byte(nil), g.buf[i].Bytes...)
	}
	return g
}

// check fails t if a guard byte changed.
func (g *guards) check(t *testing.T) {
	t.Helper()
	for i := range g.buf {
		for k := range g.buf[i].Bytes {
			if g.buf[i].Bytes[k] != g.want[i][k] {
				t.Fatalf("node %d: guard byte %d changed", i, k)
			}
		}
	}
}
