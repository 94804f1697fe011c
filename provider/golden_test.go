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
// libmlx5's qp.c does). Here the provider builds the RC send WQEs among
// them through PostSend, on a QP with the vector's QPN and at its
// wqe_index, and must produce the same bytes. The inputs repeat those in
// gen_golden.c. Regenerating needs gcc; this test only reads the file.
const rdmaCoreGolden = "../mlx5/testdata/rdma_core_golden.txt"

func loadGoldenWQEs(t *testing.T) map[string][]byte {
	t.Helper()
	data, err := os.ReadFile(rdmaCoreGolden)
	require.NoError(t, err)
	out := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "wqe" {
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
}

var goldenPosts = []goldenPost{
	{name: "write_1sge", qpn: 0x123, index: 0x0001, wr: provider.SendWR{Opcode: provider.WRRDMAWrite, Flags: provider.SendSignaled,
		RemoteAddr: 0x00007f0012345678, RKey: 0xabcdef01, SGL: []provider.SGE{{Length: 4096, LKey: 0x1234, Addr: 0x00007f00deadbeef}}}},
	{name: "write_imm", qpn: 0x123, index: 0x0002, wr: provider.SendWR{Opcode: provider.WRRDMAWriteImm,
		Flags: provider.SendSignaled | provider.SendSolicited, Imm: 0xdeadbeef, RemoteAddr: 0x1000, RKey: 0x200,
		SGL: []provider.SGE{{Length: 64, LKey: 0x300, Addr: 0x2000}}}},
	{name: "send", qpn: 0x42, index: 0x0010, wr: provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled,
		SGL: []provider.SGE{{Length: 256, LKey: 0x1100, Addr: 0x10000}}}},
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
}

// advanceTo posts signalled ctrl-only SENDs (one WQEBB each) in batches
// and lets the fake device complete them until the SQ producer is index
// and every WQE has been executed and polled.
func advanceTo(t *testing.T, e *provider.Env, index uint16) {
	t.Helper()
	var batch [32]provider.SendWR
	for i := range batch {
		batch[i] = provider.SendWR{Opcode: provider.WRSend, Flags: provider.SendSignaled}
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
			require.NoError(t, e.NewQueues(provider.EnvOpts{}))
			require.Equal(t, c.qpn, e.QP.QPN())
			provider.ToRTS(t, e.QP)
			e.Dev.RecordOps = false
			advanceTo(t, e, c.index)

			// Stale bytes everywhere in the ring: the provider must write
			// every byte of the WQE it builds.
			ring := e.SQRing(t)
			for i := range ring {
				ring[i] = 0xee
			}
			wr := c.wr
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
