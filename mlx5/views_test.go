package mlx5

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hx decodes hex dump fragments (spaces ignored), one per field, so that
// every golden byte in a table sits beside a comment that names it.
func hx(parts ...string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(strings.Join(parts, ""), " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// filled returns n bytes of v, to show that Encode overwrites what it owns.
func filled(n int, v byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = v
	}
	return b
}

func TestCtrlSegAccessors(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		want CtrlFields
	}{
		{"SEND signalled",
			hx("00 0010 0a", // 0x0 opmod 0, wqe_index 0x0010, opcode SEND
				"000042 03",  // 0x4 QPN 0x42, DS 3
				"00 0000 08", // 0x8 signature, dci stream, fm_ce_se CQ_UPDATE
				"00000000"),  // 0xC imm
			CtrlFields{WQEIndex: 0x10, Opcode: OpSend, QPN: 0x42, DS: 3, FMCESE: CECQUpdate}},
		{"all fields at their extremes",
			hx("ff ffff 25", // opmod 0xff, wqe_index 0xffff, UMR
				"ffffff 3f",  // QPN 0xffffff, DS 63
				"a5 0000 ee", // signature 0xa5, fm_ce_se 0xee
				"deadbeef"),  // imm, raw big-endian
			CtrlFields{Opmod: 0xff, WQEIndex: 0xffff, Opcode: OpUMR, QPN: 0xffffff, DS: 63, Signature: 0xa5, FMCESE: 0xee, Imm: 0xdeadbeef}},
		{"reserved bits ignored",
			hx("09 0102 14", // masked CS with 8-byte opmod
				"000001 c4",  // DS 4 with reserved bits 7:6 set
				"00 ffff 00", // dci_stream_channel_id set: not decoded
				"00000001"),
			CtrlFields{Opmod: 9, WQEIndex: 0x0102, Opcode: OpAtomicMCS, QPN: 1, DS: 4, Imm: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := CtrlSeg(tc.raw)
			require.Equal(t, tc.want, c.Fields())
			require.Equal(t, tc.want.Opmod, c.Opmod())
			require.Equal(t, tc.want.WQEIndex, c.WQEIndex())
			require.Equal(t, tc.want.Opcode, c.Opcode())
			require.Equal(t, tc.want.QPN, c.QPN())
			require.Equal(t, tc.want.DS, c.DS())
			require.Equal(t, tc.want.Signature, c.Signature())
			require.Equal(t, tc.want.FMCESE, c.FMCESE())
			require.Equal(t, tc.want.Imm, c.Imm())
		})
	}
}

func TestCtrlSegEncode(t *testing.T) {
	tests := []struct {
		name string
		f    CtrlFields
		want []byte
	}{
		{"zero value zeroes all 16 bytes", CtrlFields{}, make([]byte, 16)},
		{"WRITE_IMM",
			CtrlFields{WQEIndex: 0xabcd, Opcode: OpRDMAWriteImm, QPN: 0x123456, DS: 3, FMCESE: CECQUpdate | SolicitedEvent, Imm: 0x11223344},
			hx("00 abcd 09", "123456 03", "00 0000 0a", "11223344")},
		{"DS over 6 bits and QPN over 24 bits are truncated",
			CtrlFields{Opcode: OpSend, QPN: 0x1abcdef, DS: 0x7f},
			hx("00 0000 0a", "abcdef 3f", "00 0000 00", "00000000")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := filled(CtrlSegSize, 0xff)
			CtrlSeg(b).Encode(&tc.f)
			require.Equal(t, tc.want, b)
		})
	}
}

func TestRaddrDataAtomicSegs(t *testing.T) {
	t.Run("raddr", func(t *testing.T) {
		raw := hx("00007f00 12345678", // raddr
			"abcdef01", // rkey
			"ffffffff") // reserved: ignored on decode
		r := RaddrSeg(raw)
		require.Equal(t, RaddrFields{RAddr: 0x00007f0012345678, RKey: 0xabcdef01}, r.Fields())
		out := filled(RaddrSegSize, 0xee)
		RaddrSeg(out).Encode(&RaddrFields{RAddr: 0x00007f0012345678, RKey: 0xabcdef01})
		require.Equal(t, hx("00007f0012345678", "abcdef01", "00000000"), out, "reserved dword zeroed")
	})
	tests := []struct {
		name string
		raw  []byte
		want DataFields
	}{
		{"gather entry", hx("00001000" /* byte_count 4096 */, "00001234" /* lkey */, "00007f00deadbeef" /* addr */),
			DataFields{ByteCount: 4096, LKey: 0x1234, Addr: 0x00007f00deadbeef}},
		{"RQ terminator", hx("00000000", "00000100" /* MLX5_INVALID_LKEY */, "0000000000000000"),
			DataFields{LKey: InvalidKey}},
		{"all ones", hx("ffffffff", "ffffffff", "ffffffffffffffff"),
			DataFields{ByteCount: 0xffffffff, LKey: 0xffffffff, Addr: ^uint64(0)}},
	}
	for _, tc := range tests {
		t.Run("data/"+tc.name, func(t *testing.T) {
			d := DataSeg(tc.raw)
			require.Equal(t, tc.want, d.Fields())
			require.Equal(t, tc.want.ByteCount, d.ByteCount())
			require.Equal(t, tc.want.LKey, d.LKey())
			require.Equal(t, tc.want.Addr, d.Addr())
			out := filled(DataSegSize, 0xee)
			DataSeg(out).Encode(&tc.want)
			require.Equal(t, tc.raw, out)
		})
	}
	t.Run("atomic", func(t *testing.T) {
		raw := hx("1111222233334444", // swap_add
			"5555666677778888") // compare
		a := AtomicSeg(raw)
		require.Equal(t, uint64(0x1111222233334444), a.SwapAdd())
		require.Equal(t, uint64(0x5555666677778888), a.Compare())
		out := filled(AtomicSegSize, 0xee)
		AtomicSeg(out).Encode(0x1111222233334444, 0x5555666677778888)
		require.Equal(t, raw, out)
	})
}

func TestInlineSeg(t *testing.T) {
	tests := []struct {
		name    string
		n       uint32
		hdr     []byte
		segSize int // InlineSegSize(n): header + data, padded to 16
	}{
		{"empty", 0, hx("80000000"), 16},
		{"12 bytes fill one DS", 12, hx("8000000c"), 16},
		{"13 bytes spill", 13, hx("8000000d"), 32},
		{"28 bytes", 28, hx("8000001c"), 32},
		{"29 bytes", 29, hx("8000001d"), 48},
		{"max kernel inline 0x3ff", 0x3ff, hx("800003ff"), 1040},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := make(InlineSeg, 4)
			b.SetLen(tc.n)
			require.Equal(t, tc.hdr, []byte(b))
			require.Equal(t, tc.n, b.Len())
			require.True(t, IsInline(uint32(tc.hdr[0])<<24))
			require.Equal(t, tc.segSize, InlineSegSize(int(tc.n)))
			require.Zero(t, InlineSegSize(int(tc.n))%DSSize)
		})
	}
	require.False(t, IsInline(0x7fffffff), "a data pointer's byte_count has bit 31 clear")
	require.True(t, IsInline(InlineFlag))
}

func TestDatagramSeg(t *testing.T) {
	raw := hx("11111111 00000000", // key: Q_Key, reserved
		"80000abc",                         // dqp_dct: extended AV, dest QPN 0xabc
		"06 00 c123",                       // stat_rate_sl, fl_mlid, rlid = UDP sport
		"00000000",                         // reserved
		"020000000002 10 40",               // rmac, tclass, hop_limit
		"00112345",                         // grh_gid_fl: SGID index 1, flow label 0x12345
		"00000000000000000000ffff0a000002") // rgid ::ffff:10.0.0.2
	want := DatagramFields{Key: 0x11111111 << 32, DestQPN: 0xabc, ExtendedAV: true, StatRateSL: 6, RLID: 0xc123,
		RMAC: [6]byte{2, 0, 0, 0, 0, 2}, TClass: 0x10, HopLimit: 0x40, GRHGIDFL: 0x00112345,
		RGID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 2}}
	d := DatagramSeg(raw)
	require.Equal(t, want, d.Fields())
	require.Equal(t, uint32(0x11111111), d.QKey())
	require.Equal(t, uint8(1), d.SGIDIndex())
	require.Equal(t, uint32(0x12345), d.FlowLabel())

	out := filled(DatagramSegSize, 0xee)
	DatagramSeg(out).Encode(&want)
	require.Equal(t, raw, out)

	// Bits 30:24 of dqp_dct are reserved: dropped on decode, zero on encode.
	raw[8] = 0x7f
	require.Equal(t, uint32(0xabc), DatagramSeg(raw).DestQPN())
	require.False(t, DatagramSeg(raw).ExtendedAV())
	DatagramSeg(out).Encode(&DatagramFields{DestQPN: 0xff123456})
	require.Equal(t, hx("00123456"), out[8:12])
}

func TestWQESizes(t *testing.T) {
	bbs := []struct{ ds, want int }{{0, 0}, {1, 1}, {4, 1}, {5, 2}, {8, 2}, {9, 3}, {16, 4}, {63, 16}}
	for _, tc := range bbs {
		require.Equal(t, tc.want, WQEBBs(tc.ds), "WQEBBs(%d)", tc.ds)
	}
	strides := []struct{ sge, want int }{{-1, 16}, {0, 16}, {1, 16}, {2, 32}, {3, 64}, {4, 64}, {5, 128}, {32, 512}}
	for _, tc := range strides {
		require.Equal(t, tc.want, RecvWQEStride(tc.sge), "RecvWQEStride(%d)", tc.sge)
	}
	require.Equal(t, MaxDS*DSSize, 1008)
	require.Equal(t, 1<<WQEBBShift, WQEBBSize)
}

func TestCQE64Accessors(t *testing.T) {
	tests := []struct {
		name   string
		raw    []byte
		want   CQEFields
		format uint8
	}{
		{"responder SEND_IMM, IPv4, solicited",
			hx("00000000 00000000 00000000 00000000", // 0x00 eth / TM fields
				"00000000 00000000", // 0x10
				"02000042",          // 0x18 flags_rqpn: L3 IPv4, src QP 0x42
				"00000000",          // 0x1C hds_ip_ext, l4_l3, vlan
				"ff000007",          // 0x20 srqn_uidx: LRO count 0xff (not decoded), SRQN 7
				"deadbeef",          // 0x24 imm
				"00000000",          // 0x28 app
				"0000000f",          // 0x2C byte_cnt 15
				"1122334455667788",  // 0x30 timestamp
				"00000042",          // 0x38 sop_drop_qpn: QPN 0x42
				"0003 00 32"),       // 0x3C wqe_counter 3, signature, op_own RESP_SEND_IMM|SE
			CQEFields{Opcode: CQERespSendImm, SE: true, FlagsRQPN: 0x02000042, SRQN: 7, Imm: 0xdeadbeef, ByteCnt: 15,
				Timestamp: 0x1122334455667788, QPN: 0x42, WQECounter: 3}, 0},
		{"requester READ, owner 1, inline-scatter format 1",
			hx("00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000",
				"00000000 00000000 00000000", // 0x20..0x2B
				"00002000",                   // 0x2C byte_cnt 8192
				"0000000000000001",           // 0x30 timestamp
				"10000777",                   // 0x38 WQE opcode RDMA_READ, QPN 0x777
				"fffe 5a 05"),                // wqe_counter 0xfffe, signature 0x5a, op_own REQ|fmt 1|owner
			CQEFields{Opcode: CQEReq, Owner: true, ByteCnt: 8192, Timestamp: 1, WQEOpcode: uint8(OpRDMARead), QPN: 0x777, WQECounter: 0xfffe}, 1},
		{"requester error, retry exceeded",
			hx("00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000",
				"00000000 00000000 00000000 00000000", // 0x20..0x2F
				"00000000",                            // 0x30 reserved
				"0a 00 81 15",                         // 0x34 hw_err_synd, hw_synd_type, vendor 0x81, syndrome 0x15
				"0a000123",                            // 0x38 s_wqe_opcode SEND, QPN 0x123
				"0042 00 d1"),                         // wqe_counter 0x42, op_own REQ_ERR|owner
			CQEFields{Opcode: CQEReqErr, Owner: true, Syndrome: SyndTransportRetry, VendorErrSynd: 0x81, HWErrSynd: 0x0a,
				WQEOpcode: uint8(OpSend), QPN: 0x123, WQECounter: 0x42}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Len(t, tc.raw, CQE64Size)
			c := CQE64(tc.raw)
			require.Equal(t, tc.want, c.Fields())
			require.Equal(t, tc.want.Opcode, c.Opcode())
			require.Equal(t, tc.want.Owner, c.Owner())
			require.Equal(t, tc.want.SE, c.SE())
			require.Equal(t, tc.raw[CQEOffOpOwn], c.OpOwn())
			require.Equal(t, tc.format, c.OpOwn()>>2&3)
			require.Equal(t, tc.want.FlagsRQPN, c.FlagsRQPN())
			require.Equal(t, tc.want.SRQN, c.SRQN())
			require.Equal(t, tc.want.Imm, c.Imm())
			require.Equal(t, tc.want.ByteCnt, c.ByteCnt())
			require.Equal(t, tc.want.WQEOpcode, c.WQEOpcode())
			require.Equal(t, tc.want.QPN, c.QPN())
			require.Equal(t, tc.want.WQECounter, c.WQECounter())
			require.Equal(t, tc.want.Opcode == CQEReqErr || tc.want.Opcode == CQERespErr, c.IsError())
			// The syndromes overlay the timestamp's low half: each
			// accessor reads its bytes whatever the opcode; Fields picks.
			if c.IsError() {
				require.Equal(t, tc.want.Syndrome, c.Syndrome())
				require.Equal(t, tc.want.VendorErrSynd, c.VendorErrSynd())
			} else {
				require.Equal(t, tc.want.Timestamp, c.Timestamp())
				require.Equal(t, Syndrome(tc.want.Timestamp&0xff), c.Syndrome())
			}
		})
	}
}

func TestCQE64Encode(t *testing.T) {
	t.Run("every byte written, reserved ones zero", func(t *testing.T) {
		c := CQE64(filled(CQE64Size, 0xff))
		c.Encode(&CQEFields{})
		require.Equal(t, make([]byte, CQE64Size), []byte(c))
	})
	t.Run("error fields only in error CQEs", func(t *testing.T) {
		f := CQEFields{Opcode: CQEReq, Timestamp: 0x0102030405060708, Syndrome: SyndWRFlush, VendorErrSynd: 9, HWErrSynd: 7}
		c := make(CQE64, CQE64Size)
		c.Encode(&f)
		require.Equal(t, hx("0102030405060708"), []byte(c[CQEOffTimestamp:CQEOffTimestamp+8]), "timestamp wins")
		f = CQEFields{Opcode: CQERespErr, Timestamp: 0x0102030405060708, Syndrome: SyndWRFlush, VendorErrSynd: 9, HWErrSynd: 7}
		c.Encode(&f)
		require.Equal(t, hx("00000000 07 00 09 05"), []byte(c[CQEOffTimestamp:CQEOffTimestamp+8]), "syndromes win")
		require.Zero(t, c.Fields().Timestamp)
	})
	t.Run("SRQN and QPN masked to 24 bits", func(t *testing.T) {
		c := make(CQE64, CQE64Size)
		c.Encode(&CQEFields{SRQN: 0xff000001, QPN: 0xff000002, WQEOpcode: 0x0a})
		require.Equal(t, hx("00000001"), []byte(c[CQEOffSRQN:CQEOffSRQN+4]))
		require.Equal(t, hx("0a000002"), []byte(c[CQEOffSopDropQPN:CQEOffSopDropQPN+4]))
	})
	t.Run("init value", func(t *testing.T) {
		c := make(CQE64, CQE64Size)
		c.Encode(&CQEFields{Opcode: CQEInvalid})
		require.Equal(t, uint8(CQInitOpOwn), c.OpOwn())
	})
}

// TestCQEOwnership plays a device and a consumer over several laps of a
// small CQ: an entry becomes the consumer's exactly when the device has
// written it for the consumer's current lap (mlx5.md §6.6).
func TestCQEOwnership(t *testing.T) {
	for _, nent := range []uint32{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("nent=%d", nent), func(t *testing.T) {
			ring := make([]byte, int(nent)*CQE64Size)
			for i := uint32(0); i < nent; i++ {
				ring[int(i)*CQE64Size+CQEOffOpOwn] = CQInitOpOwn
			}
			entry := func(n uint32) CQE64 {
				off := int(n&(nent-1)) * CQE64Size
				return CQE64(ring[off : off+CQE64Size])
			}
			for pi := uint32(0); pi < 4*nent; pi++ {
				require.False(t, CQEOwnedBySW(entry(pi), pi, nent), "pi %d: not yet written", pi)
				entry(pi).Encode(&CQEFields{Opcode: CQEReq, Owner: CQEOwnerBit(pi, nent), WQECounter: uint16(pi)})
				require.True(t, CQEOwnedBySW(entry(pi), pi, nent), "pi %d: written", pi)
				require.False(t, CQEOwnedBySW(entry(pi), pi+nent, nent), "pi %d: stale for the next lap", pi)
			}
		})
	}

	owner := []struct {
		pi, nent uint32
		want     bool
	}{
		{0, 4, false}, {3, 4, false}, {4, 4, true}, {7, 4, true}, {8, 4, false},
		{0xffffffff, 4, true}, {0xffffffff, 1 << 31, true}, {0x7fffffff, 1 << 31, false},
	}
	for _, tc := range owner {
		require.Equal(t, tc.want, CQEOwnerBit(tc.pi, tc.nent), "CQEOwnerBit(%#x, %d)", tc.pi, tc.nent)
	}

	// An INVALID opcode is never software's, whatever the owner bit says.
	c := make(CQE64, CQE64Size)
	c[CQEOffOpOwn] = CQInitOpOwn | 1
	require.False(t, CQEOwnedBySW(c, 4, 4))
}

func TestDBRecAndCQArm(t *testing.T) {
	d := DBRec(filled(DBRecSize, 0))
	d.SetWord(DBRRecv, 0x1234)
	d.SetWord(DBRSend, 0xfffe)
	require.Equal(t, hx("00001234", "0000fffe"), []byte(d))
	require.Equal(t, uint32(0x1234), d.Word(DBRRecv))
	require.Equal(t, uint32(0xfffe), d.Word(DBRSend))
	require.Equal(t, DBRRecv, DBRSetCI)
	require.Equal(t, DBRSend, DBRArm)

	tests := []struct {
		name  string
		arm   CQArm
		bytes []byte // ArmWord BE32 then CQN BE32
		back  CQArm  // what ParseCQArm returns
	}{
		{"next completion", CQArm{SN: 0, CI: 0x10, CQN: 5}, hx("00000010", "00000005"), CQArm{CI: 0x10, CQN: 5}},
		{"solicited, sn 3", CQArm{SN: 3, SolicitedOnly: true, CI: 0xffffff, CQN: 0xffffff},
			hx("31ffffff", "00ffffff"), CQArm{SN: 3, SolicitedOnly: true, CI: 0xffffff, CQN: 0xffffff}},
		{"sn and ci masked", CQArm{SN: 6, CI: 0x1000001, CQN: 1}, hx("20000001", "00000001"), CQArm{SN: 2, CI: 1, CQN: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.arm.ArmWord()
			b := []byte{byte(w >> 24), byte(w >> 16), byte(w >> 8), byte(w), 0, 0, 0, 0}
			b[4], b[5], b[6], b[7] = byte(tc.arm.CQN>>24), byte(tc.arm.CQN>>16), byte(tc.arm.CQN>>8), byte(tc.arm.CQN)
			require.Equal(t, tc.bytes, b)
			require.Equal(t, tc.back, ParseCQArm(b))
		})
	}
	// The CQN dword's top byte is not part of the CQN.
	require.Equal(t, uint32(0x000abc), ParseCQArm(hx("00000000", "ff000abc")).CQN)
}

func TestWQECounterWrap(t *testing.T) {
	tests := []struct {
		name   string
		c, d   WQECounter
		dist   int
		diff   int
		before bool
	}{
		{"equal", 5, 5, 0, 0, false},
		{"forward", 1, 3, 2, 2, true},
		{"backward", 3, 1, 65534, -2, false},
		{"across the wrap", 0xffff, 0, 1, 1, true},
		{"across the wrap, far", 0xfffe, 3, 5, 5, true},
		{"back across the wrap", 0, 0xffff, 65535, -1, false},
		{"half way", 0, 0x8000, 32768, -32768, false},
		{"just under half", 0, 0x7fff, 32767, 32767, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.dist, tc.c.Dist(tc.d), "Dist")
			require.Equal(t, tc.diff, tc.c.Diff(tc.d), "Diff")
			require.Equal(t, tc.before, tc.c.Before(tc.d), "Before")
			require.Equal(t, tc.d, tc.c.Add(tc.dist), "Add(Dist) lands on d")
		})
	}
	require.Equal(t, WQECounter(1), WQECounter(0xffff).Add(2))
	require.Equal(t, WQECounter(0xffff), WQECounter(0).Add(-1))

	in := []struct {
		name string
		c    WQECounter
		lo   WQECounter
		n    int
		want bool
	}{
		{"lo", 0xfffe, 0xfffe, 4, true},
		{"top", 0xffff, 0xfffe, 4, true},
		{"wrapped 0", 0, 0xfffe, 4, true},
		{"last", 1, 0xfffe, 4, true},
		{"one past", 2, 0xfffe, 4, false},
		{"before lo", 0xfffd, 0xfffe, 4, false},
		{"empty range", 0xfffe, 0xfffe, 0, false},
		{"whole space", 0x1234, 0x8000, 65536, true},
	}
	for _, tc := range in {
		require.Equal(t, tc.want, tc.c.InRange(tc.lo, tc.n), tc.name)
	}
}

func TestMTU(t *testing.T) {
	tests := []struct {
		m     MTU
		bytes int
	}{{0, 0}, {MTU256, 256}, {MTU512, 512}, {MTU1024, 1024}, {MTU2048, 2048}, {MTU4096, 4096}, {6, 0}, {7, 0}, {255, 0}}
	for _, tc := range tests {
		require.Equal(t, tc.bytes, tc.m.Bytes(), "MTU(%d).Bytes", tc.m)
		if tc.bytes != 0 {
			require.Equal(t, tc.m, MTUFromBytes(tc.bytes))
		}
	}
	for _, n := range []int{0, 128, 255, 1500, 8192, -256} {
		require.Equal(t, MTU(0), MTUFromBytes(n), "MTUFromBytes(%d)", n)
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		name string
		got  fmt.Stringer
		want string
	}{
		{"opcode", OpRDMAWriteImm, "RDMA_WRITE_IMM"},
		{"opcode NOP", OpNOP, "NOP"},
		{"opcode unknown", Opcode(0x42), "OPCODE_0x42"},
		{"cqe opcode", CQERespSendImm, "RESP_SEND_IMM"},
		{"cqe opcode unnamed", CQEOpcode(7), "CQE_7"},
		{"cqe opcode invalid", CQEInvalid, "INVALID"},
		{"cqe opcode out of range", CQEOpcode(0x10), "CQE_0x10"},
		{"syndrome", SyndRNRRetry, "RNR_RETRY_EXCEEDED"},
		{"syndrome unknown", Syndrome(0x93), "SYNDROME_0x93"},
		{"qp state", QPStateRTS, "RTS"},
		{"qp state SQE", QPStateSQER, "SQE"},
		{"qp state unknown", QPState(9), "STATE_0x09"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.got.String(), tc.name)
	}
	for op := range Opcode(0x30) {
		s := op.String()
		require.NotEmpty(t, s)
		if _, ok := opcodeNames[op]; !ok {
			require.Equal(t, "OPCODE_0x"+hex.EncodeToString([]byte{byte(op)}), s)
		}
	}
}

func TestCmdErrors(t *testing.T) {
	err := fmt.Errorf("create qp: %w", &CmdError{Cmd: "CREATE_QP", Status: StatusBadParam, Reason: "sq size 3 not a power of two"})
	require.ErrorIs(t, err, StatusBadParam)
	require.NotErrorIs(t, err, StatusBadIndex)
	var ce *CmdError
	require.True(t, errors.As(err, &ce))
	require.Equal(t, "create qp: CREATE_QP: mlx5 command status: bad parameter: sq size 3 not a power of two", err.Error())
	require.Equal(t, "mlx5 command status 0x7f", CmdStatus(0x7f).Error())
	require.Equal(t, "mlx5 command status: bad output length", StatusBadOutputLength.Error())
}
