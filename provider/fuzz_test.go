package provider_test

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

var (
	fuzzOnce sync.Once
	fuzzEnv  *provider.Env
	fuzzErr  error
	fuzzOpts = provider.EnvOpts{Progress: true, Cap: provider.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 4, MaxInline: 200}}
	// UD address handles of the fuzz context: a live one and a destroyed one.
	fuzzAH, fuzzDeadAH *provider.AH
)

// fuzzType is the QP type an input runs on: bits 7-6 of its first byte
// (0 and 1: RC, so that ASCII inputs stay RC; 2: UC; 3: UD).
func fuzzType(data []byte) provider.QPType {
	if len(data) == 0 {
		return provider.QPTypeRC
	}
	switch data[0] >> 6 {
	case 2:
		return provider.QPTypeUC
	case 3:
		return provider.QPTypeUD
	}
	return provider.QPTypeRC
}

// fuzzReader hands out bytes of the fuzz input, zeros once it runs out.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) u8() byte {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *fuzzReader) u16() uint16 { return uint16(r.u8())<<8 | uint16(r.u8()) }

func (r *fuzzReader) u32() uint32 { return uint32(r.u16())<<16 | uint32(r.u16()) }

// decodeWRs turns fuzz bytes into a WR list: opcodes including invalid
// ones, every flag bit plus an unknown one, 0..5 SGEs (the QP allows 4) of
// 0..1099 bytes, pointing into the registered buffer, outside host memory
// or across its end. For a UD QP each WR also gets an address handle
// (live, missing or destroyed), a remote QPN (sometimes wider than 24
// bits) and a remote Q_Key (sometimes with bit 31 set).
func decodeWRs(e *provider.Env, r *fuzzReader, typ provider.QPType) []provider.SendWR {
	n := int(r.u8()%8) + 1
	wrs := make([]provider.SendWR, 0, n)
	end := e.Mem.Base() + uint64(e.Mem.Size())
	for i := 0; i < n && len(r.b) > 0; i++ {
		wr := provider.SendWR{WRID: uint64(i), Opcode: provider.WROpcode(r.u8() % 8), Flags: provider.SendFlags(r.u8() & 0x1f)}
		nsge := int(r.u8() % 6)
		for j := 0; j < nsge; j++ {
			l := uint32(r.u16() % 1100)
			where := r.u8()
			var addr uint64
			switch {
			case where < 200:
				addr = e.Buf.Addr + uint64(where)*256
			case where < 250:
				addr = uint64(where) * 4096 // not in the region
			default:
				addr = end - uint64(where-249)*8 // runs past the end
			}
			wr.SGL = append(wr.SGL, provider.SGE{Addr: addr, Length: l, LKey: e.MR.LKey})
		}
		wr.Imm, wr.RemoteAddr, wr.RKey = r.u32(), uint64(r.u32()), r.u32()
		wr.CompareAdd, wr.Swap = uint64(r.u32()), uint64(r.u32())<<32
		if typ == provider.QPTypeUD {
			switch sel := r.u8(); {
			case sel < 200:
				wr.AH = fuzzAH
			case sel < 230:
				wr.AH = fuzzDeadAH
			} // else: no AH
			wr.RemoteQPN = r.u32()
			if wr.RemoteQPN>>24&1 == 0 {
				wr.RemoteQPN &= 0xffffff
			}
			wr.RemoteQKey = r.u32()
		}
		wrs = append(wrs, wr)
	}
	return wrs
}

func FuzzPostSend(f *testing.F) {
	f.Add([]byte{0, 0, 2, 1, 0, 0, 64, 0})
	f.Add([]byte{1, 2, 10, 1, 0, 60, 5, 1, 2, 3, 4})
	f.Add([]byte{3, 3, 11, 2, 0, 100, 7, 0, 20, 9, 9, 9, 9, 3, 2, 0, 1, 1, 1})
	f.Add([]byte{7, 4, 26, 3, 1, 0, 0, 0, 0, 0, 255, 255, 250})
	f.Add([]byte{0, 1, 5, 2, 1, 0, 8, 3, 0, 8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8}) // CS
	f.Add([]byte{0, 1, 6, 3, 2, 0, 16, 4, 0, 0, 9, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1})                     // FA, fenced, 2 SGEs
	// UD (first byte 0xc0..0xff): SEND with one SGE through the AH, QPN
	// 0x123, Q_Key 0x11111111.
	f.Add([]byte{0xc0, 0, 2, 2, 1, 0, 64, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0x01, 0x23, 0x11, 0x11, 0x11, 0x11})
	// UD: SEND_IMM inline, Q_Key with bit 31 (the QP's), then an RDMA WRITE
	// (refused on UD).
	f.Add([]byte{0xc1, 1, 3, 8, 1, 0, 20, 9, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 7, 0x80, 0, 0, 0, 0, 1, 0})
	// UD: no AH, then a QPN wider than 24 bits.
	f.Add([]byte{0xc0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 240, 0, 0, 0, 1, 0, 0, 0, 0})
	// UC (first byte 0x80..0xbf): RDMA WRITE_IMM, then RDMA READ (refused).
	f.Add([]byte{0x80, 1, 1, 2, 1, 0, 100, 3, 0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 0,
		4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(fuzzBody)
}

// fuzzBody posts the WR lists decoded from data and checks every WQE the
// provider accepted.
func fuzzBody(t *testing.T, data []byte) {
	// One context per process (a memfd region per input would make each
	// execution ~1 ms); a fresh CQ and QP per input.
	fuzzOnce.Do(func() {
		fuzzEnv, fuzzErr = provider.NewEnvErr(fuzzOpts)
		if fuzzErr != nil {
			return
		}
		ah := provider.AHAttr{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 2}, DMAC: [6]byte{2, 0, 0, 0, 0, 2}, Port: 1, HopLimit: 64}
		if fuzzAH, fuzzErr = fuzzEnv.PD.CreateAH(ah); fuzzErr != nil {
			return
		}
		if fuzzDeadAH, fuzzErr = fuzzEnv.PD.CreateAH(ah); fuzzErr != nil {
			return
		}
		fuzzErr = fuzzDeadAH.Destroy()
	})
	require.NoError(t, fuzzErr)
	e := fuzzEnv
	typ := fuzzType(data)
	opts := fuzzOpts
	opts.Type = typ
	inUse := e.Mem.InUse()
	require.NoError(t, e.NewQueues(opts))
	defer func() {
		require.NoError(t, e.DropQueues())
		require.Equal(t, inUse, e.Mem.InUse(), "queue memory freed")
	}()
	{
		provider.ToRTSAs(t, typ, e.QP)
		e.Dev.RecordOps = false
		r := &fuzzReader{b: data}
		var wc [16]provider.WC
		for round := 0; len(r.b) > 0 && round < 16; round++ {
			e.QP.SetBlueFlame(r.u8()&1 == 0)
			wrs := decodeWRs(e, r, typ)
			before := e.QP.SQProducer()
			bad, err := e.QP.PostSend(wrs)
			require.GreaterOrEqual(t, bad, 0)
			require.LessOrEqual(t, bad, len(wrs))
			if err != nil {
				var oe *provider.OpError
				require.ErrorAs(t, err, &oe)
				require.Equal(t, bad, oe.Index)
				require.Equal(t, e.QP.QPN(), oe.QPN)
				known := false
				for _, s := range []error{provider.ErrInvalidArg, provider.ErrQueueFull, provider.ErrTooManySGE, provider.ErrInlineTooBig} {
					known = known || errors.Is(err, s)
				}
				require.True(t, known, "unexpected error %v", err)
			} else {
				require.Equal(t, len(wrs), bad)
			}
			// Every accepted WR left a well-formed WQE, back to back.
			idx := before
			for i := 0; i < bad; i++ {
				w, werr := e.QP.WQE(idx)
				require.NoError(t, werr, "wr %d at %#x", i, idx)
				c := mlx5.CtrlSeg(w)
				require.Equal(t, e.QP.QPN(), c.QPN())
				require.Equal(t, idx, c.WQEIndex())
				require.GreaterOrEqual(t, c.DS(), uint8(1))
				require.LessOrEqual(t, c.DS(), uint8(mlx5.MaxDS))
				op, ok := map[provider.WROpcode]mlx5.Opcode{provider.WRRDMAWrite: mlx5.OpRDMAWrite,
					provider.WRRDMAWriteImm: mlx5.OpRDMAWriteImm, provider.WRSend: mlx5.OpSend,
					provider.WRSendImm: mlx5.OpSendImm, provider.WRRDMARead: mlx5.OpRDMARead,
					provider.WRAtomicCmpSwp: mlx5.OpAtomicCS, provider.WRAtomicFetchAdd: mlx5.OpAtomicFA}[wrs[i].Opcode]
				require.True(t, ok, "opcode %v accepted", wrs[i].Opcode)
				require.Equal(t, op, c.Opcode())
				switch typ {
				case provider.QPTypeUC:
					require.NotContains(t, []mlx5.Opcode{mlx5.OpRDMARead, mlx5.OpAtomicCS, mlx5.OpAtomicFA}, op, "UC posted %v", op)
				case provider.QPTypeUD:
					require.Contains(t, []mlx5.Opcode{mlx5.OpSend, mlx5.OpSendImm}, op, "UD posted %v", op)
				}
				atomic := op == mlx5.OpAtomicCS || op == mlx5.OpAtomicFA
				// Walk the segments: the DS must account for exactly them.
				o := 16
				if typ == provider.QPTypeUD {
					require.Same(t, fuzzAH, wrs[i].AH, "UD posted without the live AH")
					d := mlx5.DatagramSeg(w[16:64])
					require.True(t, d.ExtendedAV())
					require.Equal(t, wrs[i].RemoteQPN, d.DestQPN(), "remote QPN fits 24 bits")
					qkey := wrs[i].RemoteQKey
					if qkey&0x80000000 != 0 {
						qkey = provider.UDQKey
					}
					require.Equal(t, qkey, d.QKey())
					require.Equal(t, fuzzAH.UDPSPort(), d.RLID())
					o += mlx5.DatagramSegSize
				}
				switch {
				case atomic:
					o += 32 // raddr + atomic
				case op != mlx5.OpSend && op != mlx5.OpSendImm:
					o += 16
				}
				if o < len(w) && mlx5.IsInline(binary.BigEndian.Uint32(w[o:])) {
					require.False(t, atomic || op == mlx5.OpRDMARead, "inline %v", op)
					o += mlx5.InlineSegSize(int(mlx5.InlineSeg(w[o:]).Len()))
				} else {
					for o < len(w) {
						n := mlx5.DataSeg(w[o:]).ByteCount()
						require.NotZero(t, n, "zero-length SGEs are skipped")
						require.False(t, mlx5.IsInline(n), "byte_count below 2^31")
						if atomic {
							require.Equal(t, uint32(8), n, "atomic data segments carry 8 bytes")
						}
						o += 16
					}
				}
				require.Equal(t, len(w), o, "DS consistent with the segments")
				idx += uint16(mlx5.WQEBBs(int(c.DS())))
			}
			require.Equal(t, idx, e.QP.SQProducer())
			require.Equal(t, uint32(idx), e.DBR(t).Word(mlx5.DBRSend))
			if _, perr := e.CQ.Poll(wc[:]); perr != nil {
				require.NoError(t, perr)
			}
		}
		require.Empty(t, e.Dev.QPs[e.QP.QPN()].Errors, "device saw a malformed WQE")
	}
}
