package provider_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/stretchr/testify/require"
)

// The rdma-core golden WQEs (mlx5/testdata/gen_golden.sh compiles
// gen_golden.c against <infiniband/mlx5dv.h> and fills the segments as
// libmlx5's qp.c does). Here the provider builds the RC and UD send WQEs
// among them through PostSend, on a QP with the vector's QPN and at its
// wqe_index, and the SRQ WQEs through SRQ.PostRecv, and must produce the
// same bytes; it also parses golden CQEs. The inputs repeat those in
// gen_golden.c. Regenerating needs gcc; this test only reads the file.
const rdmaCoreGolden = "../mlx5/testdata/rdma_core_golden.txt"

// loadGoldenWQEs returns the golden send WQEs.
func loadGoldenWQEs(t *testing.T) map[string][]byte { return loadGoldenKind(t, "wqe") }

// loadGoldenKind returns the golden records of one kind ("wqe", "srq",
// "cqe") by name: the bytes of their hex field.
func loadGoldenKind(t *testing.T, kind string) map[string][]byte {
	t.Helper()
	data, err := os.ReadFile(rdmaCoreGolden)
	require.NoError(t, err)
	out := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[0] == kind {
			b, err := hex.DecodeString(f[2])
			require.NoError(t, err, "golden %s", f[1])
			out[f[1]] = b
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func seqBytes(n int, f func(i int) byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = f(i)
	}
	return b
}

type goldenPost struct {
	name   string
	qpn    uint32
	index  uint16
	wr     provider.SendWR
	inline []byte // copied into the registered buffer; the WR's one SGE points at it
	typ    provider.QPType
	ah     *provider.AHAttr // UD: the WR's AH is created with these attributes
}

// goldenDGID / goldenDMAC are the UD vectors' destination (::ffff:10.0.0.2
// behind 02:00:00:00:00:02).
var (
	goldenDGID = [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 2}
	goldenDMAC = [6]byte{0x02, 0, 0, 0, 0, 0x02}
)

var goldenPosts = []goldenPost{
	{name: "write_1sge", qpn: 0x123, index: 0x0001, wr: provider.SendWR{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		RemoteAddr: 0x00007f0012345678, RKey: 0xabcdef01, SGL: []provider.SGE{{Length: 4096, LKey: 0x1234, Addr: 0x00007f00deadbeef}}}},
	{name: "write_imm", qpn: 0x123, index: 0x0002, wr: provider.SendWR{Opcode: provider.WRRDMAWriteImm,
		Flags: provider.SendSignaled | provider.SendSolicited, Imm: 0xdeadbeef, RemoteAddr: 0x1000, RKey: 0x200,
		SGL: []provider.SGE{{Length: 64, LKey: 0x300, Addr: 0x2000}}}},
	{name: "send", qpn: 0x42, index: 0x0010, wr: provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{{Length: 256, LKey: 0x1100, Addr: 0x10000}}}},
	{name: "send_inval", qpn: 0x42, index: 0x0014, wr: provider.SendWR{Opcode: provider.WRSendWithInv, Flags: provider.SendSignaled,
		InvalidateRKey: 0x00c0ffee, SGL: []provider.SGE{{Length: 512, LKey: 0x1100, Addr: 0x10400}}}},
	{name: "send_imm_inline", qpn: 0x42, index: 0x0011, inline: []byte("softnic inline!"),
		wr: provider.SendWR{Opcode: provider.WRSendImm, Flags: provider.SendSignaled | provider.SendInline, Imm: 0x01020304}},
	{name: "send_inline_12", qpn: 0x42, index: 0x0012, inline: seqBytes(12, func(i int) byte { return byte(i) }),
		wr: provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled | provider.SendInline}},
	{name: "send_inline_200", qpn: 0x42, index: 0x0013, inline: seqBytes(200, func(i int) byte { return byte(i*7 + 3) }),
		wr: provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendInline}},
	{name: "read", qpn: 0x777, index: 0x0100, wr: provider.SendWR{Opcode: provider.WRRDMARead, Flags: provider.SendSignaled,
		RemoteAddr: 0xffffffffffff0000, RKey: 0x12345678, SGL: []provider.SGE{{Length: 8192, LKey: 0x00abcd00, Addr: 0x0000100000000000}}}},
	{name: "send_3sge", qpn: 0x42, index: 0x0200, wr: provider.SendWR{Opcode: provider.WRSend,
		SGL: []provider.SGE{{Length: 100, LKey: 0x10, Addr: 0x1000}, {Length: 200, LKey: 0x20, Addr: 0x2000}, {Length: 300, LKey: 0x30, Addr: 0x3000}}}},
	{name: "write_pi_fffe", qpn: 0x123, index: 0xfffe, wr: provider.SendWR{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		RemoteAddr: 0x4000, RKey: 0x44, SGL: []provider.SGE{{Length: 1, LKey: 0x45, Addr: 0x5000}}}},
	{name: "send_pi_ffff", qpn: 0x123, index: 0xffff, wr: provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{{Length: 2, LKey: 0x46, Addr: 0x5001}}}},
	{name: "write_qpn_ffffff", qpn: 0xffffff, index: 0x0003, wr: provider.SendWR{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		RemoteAddr: 0x00000000ffffffff, RKey: 0xffffffff, SGL: []provider.SGE{{Length: 0x7fffffff, LKey: 0xfffffeff, Addr: 0xfffffffffffffff0}}}},
	// Atomics: ibv_send_wr.wr.atomic's compare_add and swap. Swap is set on
	// the fetch-and-adds too, to show it is not used.
	{name: "atomic_cs", qpn: 0x123, index: 0x0005, wr: provider.SendWR{Opcode: provider.WRAtomicCmpSwp,
		Flags: provider.SendFence | provider.SendSignaled, RemoteAddr: 0x8000, RKey: 0x55,
		Swap: 0x1111222233334444, CompareAdd: 0x5555666677778888, SGL: []provider.SGE{{Length: 8, LKey: 0x66, Addr: 0x9000}}}},
	{name: "atomic_fa", qpn: 0x123, index: 0x0006, wr: provider.SendWR{Opcode: provider.WRAtomicFetchAdd,
		Flags: provider.SendSignaled, RemoteAddr: 0x8008, RKey: 0x55, CompareAdd: 1, Swap: 0xdead,
		SGL: []provider.SGE{{Length: 8, LKey: 0x66, Addr: 0x9008}}}},
	{name: "atomic_fa_sge16", qpn: 0x123, index: 0x0008, wr: provider.SendWR{Opcode: provider.WRAtomicFetchAdd,
		Flags: provider.SendSignaled | provider.SendSolicited, RemoteAddr: 0x00007f0000001ff8, RKey: 0xabcdef01,
		CompareAdd: 0xffffffffffffffff, Swap: 0x0123456789abcdef,
		SGL: []provider.SGE{{Length: 16, LKey: 0x1234, Addr: 0x00007f00deadbee0}}}},
	// UD through an AH (the AV mlx5_create_ah builds for RoCEv2).
	{name: "ud_send_ah", qpn: 0x99, index: 0x0009, typ: provider.QPTypeUD,
		ah: &provider.AHAttr{DGID: goldenDGID, DMAC: goldenDMAC, Port: 1, SGIDIndex: 1, TrafficClass: 0x10, HopLimit: 64,
			FlowLabel: 0x12345},
		wr: provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled, RemoteQPN: 0xabc, RemoteQKey: 0x11111111,
			SGL: []provider.SGE{{Length: 512, LKey: 0x77, Addr: 0xa000}}}},
	{name: "ud_send_ah_imm_inline", qpn: 0x99, index: 0x000a, typ: provider.QPTypeUD, inline: []byte("softnic inline!"),
		ah: &provider.AHAttr{DGID: goldenDGID, DMAC: goldenDMAC, Port: 1, HopLimit: 1, FlowLabel: 0xfffff},
		wr: provider.SendWR{Opcode: provider.WRSendImm, Flags: provider.SendSignaled | provider.SendInline, Imm: 0xcafef00d,
			RemoteQPN: 0xffffff, RemoteQKey: 0x7fffffff}},
	{name: "ud_send_ah_2sge_fence_se", qpn: 0x99, index: 0x000b, typ: provider.QPTypeUD,
		ah: &provider.AHAttr{DGID: goldenDGID, DMAC: goldenDMAC, Port: 1, SGIDIndex: 1, TrafficClass: 0xb8, HopLimit: 255,
			FlowLabel: 1},
		wr: provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendFence | provider.SendSolicited, RemoteQPN: 1, RemoteQKey: 1,
			SGL: []provider.SGE{{Length: 100, LKey: 0x77, Addr: 0xb000}, {Length: 1000, LKey: 0x78, Addr: 0xc000}}}},
}

// advanceTo posts signalled SENDs without data (one WQEBB each: ctrl, or
// ctrl + datagram through ah on a UD QP) in batches and lets the fake
// device complete them until the SQ producer is index and every WQE has
// been executed and polled.
func advanceTo(t *testing.T, e *provider.Env, index uint16, ah *provider.AH) {
	t.Helper()
	var batch [32]provider.SendWR
	for i := range batch {
		batch[i] = provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled, AH: ah, RemoteQPN: 1}
	}
	wcs := make([]provider.WC, len(batch))
	for left := int(index - e.QP.SQProducer()); left > 0; {
		n := min(left, len(batch))
		posted, err := e.QP.PostSend(batch[:n])
		require.NoError(t, err)
		for got := 0; got < posted; {
			k, err := e.CQ.Poll(wcs)
			require.NoError(t, err)
			require.NotZero(t, k, "fake device went idle")
			got += k
		}
		left -= posted
	}
	require.Equal(t, index, e.QP.SQProducer())
	require.Equal(t, index, e.Dev.QPs[e.QP.QPN()].Consumed)
}

func TestGoldenRDMACoreProviderWQE(t *testing.T) {
	golden := loadGoldenWQEs(t)
	for _, c := range goldenPosts {
		t.Run(c.name, func(t *testing.T) {
			want, ok := golden[c.name]
			require.True(t, ok, "vector %q missing from %s", c.name, rdmaCoreGolden)
			e := provider.NewEnv(t, provider.EnvOpts{Progress: true})
			require.NoError(t, e.DropQueues())
			e.Dev.SetNextQPN(c.qpn)
			require.NoError(t, e.NewQueues(provider.EnvOpts{Type: c.typ}))
			require.Equal(t, c.qpn, e.QP.QPN())
			provider.ToRTSAs(t, c.typ, e.QP)
			e.Dev.RecordOps = false
			var ah *provider.AH
			if c.ah != nil {
				var err error
				ah, err = e.PD.CreateAH(*c.ah)
				require.NoError(t, err)
			}
			advanceTo(t, e, c.index, ah)

			// Stale bytes everywhere in the ring: the provider must write
			// every byte of the WQE it builds.
			ring := e.SQRing(t)
			for i := range ring {
				ring[i] = 0xee
			}
			wr := c.wr
			wr.AH = ah
			if c.inline != nil {
				copy(e.Buf.Bytes[4096:], c.inline)
				wr.SGL = []provider.SGE{e.MR.SGE(4096, uint32(len(c.inline)))}
			}
			bad, err := e.QP.PostSend([]provider.SendWR{wr})
			require.NoError(t, err)
			require.Equal(t, 1, bad)
			got, err := e.QP.WQE(c.index)
			require.NoError(t, err)
			require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(got), "provider WQE vs rdma-core")
			require.Equal(t, uint16(mlx5.WQEBBs(len(want)/mlx5.DSSize)), e.QP.SQProducer()-c.index)
		})
	}
}

// goldenSRQPosts are the SRQ vectors: an SRQ of maxSGE scatter entries,
// the receives posted before (pre, each without SGEs) and the one whose
// WQE is compared.
var goldenSRQPosts = []struct {
	name   string
	maxSGE int
	pre    int
	wr     provider.RecvWR
}{
	{"srq_wqe_2sge", 3, 0, provider.RecvWR{WRID: 1, SGL: []provider.SGE{{Addr: 0x7f0000001000, Length: 4096, LKey: 0x1111},
		{Addr: 0x7f0000003000, Length: 100, LKey: 0x1111}}}},
	{"srq_wqe_full", 1, 6, provider.RecvWR{WRID: 7, SGL: []provider.SGE{{Addr: 0x7f0000002000, Length: 64, LKey: 0x2222}}}},
	{"srq_wqe_empty", 2, 2, provider.RecvWR{WRID: 3}},
}

func TestGoldenRDMACoreProviderSRQWQE(t *testing.T) {
	golden := loadGoldenKind(t, "srq")
	require.Len(t, golden, len(goldenSRQPosts), "every golden SRQ WQE has a provider case")
	for _, c := range goldenSRQPosts {
		t.Run(c.name, func(t *testing.T) {
			want, ok := golden[c.name]
			require.True(t, ok, "vector %q missing from %s", c.name, rdmaCoreGolden)
			e := provider.NewEnv(t, provider.EnvOpts{})
			srq, err := e.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: 7, MaxSGE: c.maxSGE})
			require.NoError(t, err)
			require.Equal(t, len(want), srq.Info().Stride, "stride")
			for i := 0; i < c.pre; i++ {
				_, err := srq.PostRecv([]provider.RecvWR{{WRID: uint64(100 + i)}})
				require.NoError(t, err)
			}
			slot := int(srq.Info().Head)
			require.Equal(t, c.pre, slot, "a new SRQ fills WQEs 0, 1, 2, ... in order")
			n, err := srq.PostRecv([]provider.RecvWR{c.wr})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			got, err := srq.WQE(slot)
			require.NoError(t, err)
			require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(got), "provider SRQ WQE vs rdma-core")
		})
	}
}

// TestGoldenRDMACoreProviderCQE parses golden UD receive CQEs (written
// field by field into struct mlx5_cqe64) on a UD QP attached to an SRQ.
func TestGoldenRDMACoreProviderCQE(t *testing.T) {
	golden := loadGoldenKind(t, "cqe")
	cases := []struct {
		name string
		want provider.WC // WRID: 100 + the SRQ slot the CQE names
	}{
		{"resp_send_ud_grh_ipv4", provider.WC{WRID: 105, Opcode: provider.WCRecv, ByteLen: 140, QPNum: 0x99, SrcQP: 0xabc,
			Flags: provider.WCFlagGRH, SL: 2, NetworkHdr: provider.NetHdrIPv4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw, ok := golden[c.name]
			require.True(t, ok, "vector %q missing", c.name)
			e := provider.NewEnv(t, provider.EnvOpts{})
			srq, err := e.PD.CreateSRQ(provider.SRQInitAttr{MaxWR: 15, MaxSGE: 1})
			require.NoError(t, err)
			require.Equal(t, mlx5.CQE64(raw).SRQN(), srq.SRQN(), "the fake hands out the vector's SRQN")
			require.NoError(t, e.DropQueues())
			e.Dev.SetNextQPN(c.want.QPNum)
			require.NoError(t, e.NewQueues(provider.EnvOpts{Type: provider.QPTypeUD, SRQ: srq}))
			provider.ToRTSAs(t, provider.QPTypeUD, e.QP)
			for i := 0; i < 8; i++ {
				_, err := srq.PostRecv([]provider.RecvWR{{WRID: uint64(100 + i), SGL: []provider.SGE{e.MR.SGE(uint64(i)*1024, 1024)}}})
				require.NoError(t, err)
			}
			require.NoError(t, e.Dev.WriteRawCQE(e.CQ.CQN(), raw))
			var wc [1]provider.WC
			n, err := e.CQ.Poll(wc[:])
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, c.want, wc[0])
			require.Equal(t, 7, srq.Outstanding(), "the completed SRQ WQE was freed")
			require.Equal(t, uint16(mlx5.CQE64(raw).WQECounter()), srq.Info().Tail, "freed at the tail")
		})
	}
}
