package device_test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// FuzzRawRQ writes a responder's receive WQEs and doorbell record by hand,
// as a buggy or hostile driver would, and sends at them: SGEs with keys of
// another PD, the terminator key in odd places, lengths with bit 31 set,
// addresses outside the MR, a record far ahead or behind, SRQ next
// pointers anywhere. The first record's byte 15 picks the QP type
// (%3: RC, UC, UD) and, with bit 7, an SRQ behind it. Each 16-byte record
// is one step (r[0]%4): 0 a receive WQE at slot r[1] with r[2]%5 SGEs
// (length r[3:5]<<r[5]%32, key r[6] as in FuzzRawSQ, address offset
// r[7]*64, next_wqe_index r[8:10] on an SRQ); 1 the record set to
// r[1:5]; 2 a SEND (r[1]&1: WRITE_IMM on RC/UC) of r[2:4] bytes from the
// requester; 3 run the engine r[1] events. The device must not panic,
// write outside the MRs, or be left wedged: a fresh connection on the same
// devices still completes a SEND.
func FuzzRawRQ(f *testing.F) {
	rec := func(b ...byte) []byte { r := make([]byte, 16); copy(r, b); return r }
	cat := func(rs ...[]byte) []byte {
		var o []byte
		for _, r := range rs {
			o = append(o, r...)
		}
		return o
	}
	f.Add(cat(rec(0, 0, 1, 0x10, 0), rec(1, 0, 0, 0, 1), rec(2, 0, 0, 64)))                    // one good receive, a SEND
	f.Add(cat(rec(0, 0, 1, 0x10, 0, 0, 1), rec(1, 0, 0, 0, 1), rec(2, 0, 0, 64)))              // another PD's lkey
	f.Add(cat(rec(0, 0, 2, 0x80, 0, 24), rec(1, 0, 0, 0, 1), rec(2, 0, 0, 64)))                // bit 31 lengths
	f.Add(cat(rec(0, 0, 1, 0x10, 0), rec(1, 0, 0, 0x7f, 0xff), rec(2, 0, 0, 64), rec(3, 100))) // record far ahead
	f.Add(cat(rec(0, 0, 1, 0x10, 0, 0, 2), rec(1, 0, 0, 0, 1), rec(2, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)))
	f.Add(cat(rec(0, 0, 1, 0x10, 0, 0, 0, 0, 0xff, 0xff), rec(1, 0, 0, 0, 2), rec(2, 0, 0, 64), rec(2, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80)))
	f.Add(cat(rec(0, 0, 1, 0x10, 0), rec(1, 0, 0, 0, 1), rec(2, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2))) // UD, long SEND
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
		all := provider.AccessLocalWrite | provider.AccessRemoteWrite | provider.AccessRemoteRead
		opts := testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10, RQDepth: 8, Access: all, Timeout: 2, RetryCnt: 2, MinRNR: 1, RNRRetry: 2}
		if len(data) >= 16 {
			opts.Type = [...]provider.QPType{provider.QPTypeRC, provider.QPTypeUC, provider.QPTypeUD}[data[15]&0x7f%3]
			opts.SRQ = data[15]&0x80 != 0
		}
		eps, err := w.ConnectRC(opts)
		if err != nil {
			t.Fatal(err)
		}
		req, rsp := eps[0], eps[1]
		other := foreignMR(t, rsp, all)
		g := newGuards(t, eps)
		// Where the receive WQEs and their record live.
		var base, dbr uint64
		var cnt, stride, off int
		if opts.SRQ {
			in := rsp.SRQ.Info()
			base, dbr, cnt, stride, off = in.Addr, in.DBRAddr, in.WQEs, in.Stride, mlx5.SRQNextSegSize
		} else {
			in := rsp.QP.SQInfo()
			base, dbr, cnt, stride = in.RQAddr, in.DBRAddr, in.RQWQEs, in.RQStride
		}
		mem := rsp.Host.Mem
		for ; len(data) >= 16; data = data[16:] {
			r := data[:16]
			switch r[0] % 4 {
			case 0:
				wqe := make([]byte, stride)
				if opts.SRQ {
					copy(wqe[mlx5.SRQOffNextWQEIndex:], r[8:10])
				}
				for i := 0; i < int(r[2]%5) && off+(i+1)*mlx5.DataSegSize <= stride; i++ {
					n := uint32(binary.BigEndian.Uint16(r[3:5])) << (r[5] % 32)
					key := rsp.MR.LKey
					switch r[6] & 3 {
					case 1:
						key = other.LKey
					case 2:
						key = mlx5.InvalidKey
					case 3:
						key = uint32(r[6]) << 8
					}
					mlx5.DataSeg(wqe[off+i*mlx5.DataSegSize:]).Encode(&mlx5.DataFields{ByteCount: n, LKey: key, Addr: rsp.MR.Addr + uint64(r[7])*64})
				}
				_ = mem.Write(base+uint64(int(r[1])%cnt*stride), wqe)
			case 1:
				_ = mem.Write(dbr, r[1:5])
			case 2:
				n := uint32(binary.BigEndian.Uint16(r[2:4])) % 8192
				wr := provider.SendWR{WRID: 1, Opcode: provider.WRSend, SGL: []provider.SGE{req.MR.SGE(0, n)}}
				switch {
				case opts.Type == provider.QPTypeUD:
					wr.AH, wr.RemoteQPN, wr.RemoteQKey = req.AH, rsp.QP.QPN(), rsp.QKey
				case r[1]&1 != 0:
					wr.Opcode, wr.RemoteAddr, wr.RKey = provider.WRRDMAWriteImm, rsp.MR.Addr, rsp.MR.RKey
				}
				if n == 0 {
					wr.SGL = nil
				}
				_, _ = req.QP.PostSend([]provider.SendWR{wr})
			case 3:
				w.Eng.Run(int(r[1]))
			}
		}
		w.Settle(1 << 20)
		g.check(t)
		// The devices still work: a fresh RC connection completes a SEND.
		fresh, err := w.ConnectRC(testbed.ConnOpts{})
		if err != nil {
			t.Fatal(err)
		}
		a, b := fresh[0], fresh[1]
		if _, err := b.QP.PostRecv([]provider.RecvWR{{WRID: 8, SGL: []provider.SGE{b.MR.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.QP.PostSend([]provider.SendWR{{WRID: 9, Opcode: provider.WRSend, Flags: provider.SendSignaled,
			SGL: []provider.SGE{a.MR.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		wcs, err := testbed.Wait(a.SendCQ, 1)
		if err != nil || wcs[0].Status != provider.WCSuccess {
			t.Fatalf("probe SEND on a fresh QP: %v %v", wcs, err)
		}
	})
}
