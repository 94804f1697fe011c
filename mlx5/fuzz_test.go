package mlx5

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// The fuzz targets take any input, cut or zero-pad it to the view's size
// (16 or 64 bytes; the views index fixed offsets and must never panic on a
// full-size buffer) and check three things: the accessors agree with an
// independent decode, Encode(Fields(b)) reproduces b exactly on every bit
// the format carries (and zeroes the rest), and decoding that again gives
// the same Fields. Seed corpora are in testdata/fuzz/<Target>/ (taken from
// the rdma-core golden vectors). Run one with e.g.
//
//	go test ./mlx5 -run '^$' -fuzz '^FuzzCQE64$' -fuzztime 15s

// sized returns in cut or zero-padded to n bytes.
func sized(in []byte, n int) []byte {
	b := make([]byte, n)
	copy(b, in)
	return b
}

func FuzzCtrlSeg(f *testing.F) {
	f.Add(hx("00 0010 0a", "000042 03", "00 0000 08", "00000000"))
	f.Add(bytes.Repeat([]byte{0xff}, CtrlSegSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		b := sized(in, CtrlSegSize)
		c := CtrlSeg(b)
		fl := c.Fields()

		w0, w1 := binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:])
		want := CtrlFields{Opmod: uint8(w0 >> 24), WQEIndex: uint16(w0 >> 8), Opcode: Opcode(w0), QPN: w1 >> 8,
			DS: uint8(w1 & 0x3f), Signature: b[8], FMCESE: b[11], Imm: binary.BigEndian.Uint32(b[12:])}
		if fl != want {
			t.Fatalf("Fields %+v, independent decode %+v", fl, want)
		}

		out := CtrlSeg(bytes.Repeat([]byte{0xa5}, CtrlSegSize))
		out.Encode(&fl)
		// Not carried: qpn_ds bits 7:6 (reserved) and dci_stream_channel_id.
		canon := bytes.Clone(b)
		canon[7] &= 0x3f
		canon[9], canon[10] = 0, 0
		if !bytes.Equal(out, canon) {
			t.Fatalf("Encode(Fields(%x)) = %x, want %x", b, []byte(out), canon)
		}
		if out.Fields() != fl {
			t.Fatalf("decode after encode: %+v, want %+v", out.Fields(), fl)
		}
	})
}

func FuzzCQE64(f *testing.F) {
	f.Add(make([]byte, CQE64Size))
	f.Add(bytes.Repeat([]byte{0xff}, CQE64Size))
	f.Fuzz(func(t *testing.T, in []byte) {
		b := sized(in, CQE64Size)
		c := CQE64(b)
		fl := c.Fields()

		op := b[CQEOffOpOwn]
		if fl.Opcode != CQEOpcode(op>>4) || fl.Owner != (op&1 == 1) || fl.SE != (op&2 == 2) {
			t.Fatalf("op_own %#x decoded as %v owner=%v se=%v", op, fl.Opcode, fl.Owner, fl.SE)
		}
		isErr := op>>4 == 13 || op>>4 == 14
		if c.IsError() != isErr {
			t.Fatalf("IsError %v for op_own %#x", c.IsError(), op)
		}
		if fl.QPN != binary.BigEndian.Uint32(b[0x38:])&0xffffff || fl.WQECounter != binary.BigEndian.Uint16(b[0x3c:]) ||
			fl.ByteCnt != binary.BigEndian.Uint32(b[0x2c:]) || fl.Imm != binary.BigEndian.Uint32(b[0x24:]) {
			t.Fatalf("Fields %+v disagree with %x", fl, b)
		}
		_ = CQEOwnedBySW(c, binary.BigEndian.Uint32(b[0:]), 1<<(b[4]&31))

		out := CQE64(bytes.Repeat([]byte{0xa5}, CQE64Size))
		out.Encode(&fl)
		// What a CQE64 carries through Fields: flags_rqpn, SRQN [23:0],
		// imm, byte_cnt, the timestamp or (error CQEs) hw_err_synd,
		// vendor_err_synd and syndrome, sop_drop_qpn, wqe_counter and
		// op_own without the format bits. Everything else reads back 0.
		canon := make([]byte, CQE64Size)
		keep := func(lo, hi int) { copy(canon[lo:hi], b[lo:hi]) }
		keep(CQEOffFlagsRQPN, CQEOffFlagsRQPN+4)
		keep(CQEOffSRQN+1, CQEOffSRQN+4)
		keep(CQEOffImm, CQEOffImm+4)
		keep(CQEOffByteCnt, CQEOffByteCnt+4)
		if isErr {
			keep(CQEOffHWErrSynd, CQEOffHWErrSynd+1)
			keep(CQEOffVendorErrSynd, CQEOffSyndrome+1)
		} else {
			keep(CQEOffTimestamp, CQEOffTimestamp+8)
		}
		keep(CQEOffSopDropQPN, CQEOffWQECounter+2)
		canon[CQEOffOpOwn] = op &^ 0x0c
		if !bytes.Equal(out, canon) {
			t.Fatalf("Encode(Fields(%x))\n = %x\nwant %x", b, []byte(out), canon)
		}
		if out.Fields() != fl {
			t.Fatalf("decode after encode: %+v, want %+v", out.Fields(), fl)
		}
	})
}

// FuzzDataSeg covers the 16-byte WQE segments: data pointer (lossless),
// remote address (reserved dword dropped), atomic (lossless) and the inline
// header; and, on 48 bytes, the datagram segment.
func FuzzDataSeg(f *testing.F) {
	f.Add(hx("00001000", "00001234", "00007f00deadbeef"))
	f.Add(hx("8000000f", "736f66746e696320696e6c696e6521"))
	f.Fuzz(func(t *testing.T, in []byte) {
		b := sized(in, DataSegSize)

		d := DataSeg(b)
		df := d.Fields()
		if df.ByteCount != binary.BigEndian.Uint32(b) || df.LKey != binary.BigEndian.Uint32(b[4:]) || df.Addr != binary.BigEndian.Uint64(b[8:]) {
			t.Fatalf("DataSeg %x decoded as %+v", b, df)
		}
		out := DataSeg(bytes.Repeat([]byte{0xa5}, DataSegSize))
		out.Encode(&df)
		if !bytes.Equal(out, b) {
			t.Fatalf("DataSeg round trip %x -> %x", b, []byte(out))
		}

		rf := RaddrSeg(b).Fields()
		rout := RaddrSeg(bytes.Repeat([]byte{0xa5}, RaddrSegSize))
		rout.Encode(&rf)
		if !bytes.Equal(rout[:12], b[:12]) || !bytes.Equal(rout[12:], []byte{0, 0, 0, 0}) || rout.Fields() != rf {
			t.Fatalf("RaddrSeg round trip %x -> %x", b, []byte(rout))
		}

		a := AtomicSeg(b)
		aout := AtomicSeg(bytes.Repeat([]byte{0xa5}, AtomicSegSize))
		aout.Encode(a.SwapAdd(), a.Compare())
		if !bytes.Equal(aout, b) {
			t.Fatalf("AtomicSeg round trip %x -> %x", b, []byte(aout))
		}

		hdr := binary.BigEndian.Uint32(b)
		s := InlineSeg(b)
		if IsInline(hdr) != (b[0]&0x80 != 0) || s.Len() != hdr&0x7fffffff {
			t.Fatalf("inline header %#x: IsInline %v Len %d", hdr, IsInline(hdr), s.Len())
		}
		if n := int(s.Len() & 0x3ff); InlineSegSize(n)%DSSize != 0 || InlineSegSize(n) < InlineHdrSize+n {
			t.Fatalf("InlineSegSize(%d) = %d", n, InlineSegSize(n))
		}

		g := sized(in, DatagramSegSize)
		gf := DatagramSeg(g).Fields()
		gout := DatagramSeg(bytes.Repeat([]byte{0xa5}, DatagramSegSize))
		gout.Encode(&gf)
		canon := bytes.Clone(g)
		canon[8] &= 0x80 // dqp_dct bits 30:24 reserved
		clear(canon[16:20])
		if !bytes.Equal(gout, canon) || gout.Fields() != gf {
			t.Fatalf("DatagramSeg round trip %x -> %x", g, []byte(gout))
		}
	})
}
