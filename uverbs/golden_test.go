package uverbs

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The golden file is written by testdata/gen_golden.sh, which compiles
// testdata/gen_golden.c against the Linux uapi headers and fills the
// kernel's own structs. The Go encoders must produce the same bytes, and
// the decoders must read back the same fields.
const goldenPath = "testdata/uapi_golden.txt"

func loadGolden(t *testing.T) map[string][]byte {
	t.Helper()
	data, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	return parseGolden(t, data)
}

func parseGolden(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	g := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		require.Len(t, f, 2, "golden line %q", line)
		b, err := hex.DecodeString(f[1])
		require.NoError(t, err, f[0])
		g[f[0]] = b
	}
	return g
}

const (
	dynUAR   = MLX5LibCap4KUAR | MLX5LibCapDynUAR
	rtrMask  = QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	peerIPv4 = "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x0a\x00\x00\x02"
)

func writeCmd(t *testing.T, cmd Command, out int, parts ...Struct) []byte {
	t.Helper()
	b := make([]byte, 512)
	body := 0
	for _, p := range parts {
		body += p.Size()
	}
	n, err := PutWriteHdr(b, cmd, body, out)
	require.NoError(t, err)
	o := CmdHdrSize
	for _, p := range parts {
		k, err := p.Encode(b[o:])
		require.NoError(t, err)
		o += k
	}
	return b[:n]
}

// create_cq_mlx5, as gen_golden.c writes it (72 bytes, little-endian host):
//
//	00: 12000000 1200 0400            cmd_hdr: CREATE_CQ, in_words 18 (72 B), out_words 4 (8 core + 8 mlx5)
//	08: 0022000000 7f0000             response = 0x7f0000002200
//	10: efbeadde00000000              user_handle = 0xdeadbeef
//	18: ff000000 00000000 ffffffff 00000000   cqe 255, comp_vector 0, comp_channel -1, reserved
//	28: 0000100000 7f0000             mlx5 buf_addr = 0x7f0000100000
//	30: 0000200000 7f0000             mlx5 db_addr = 0x7f0000200000
//	38: 40000000 00 00 0200 0300 0000 00000000   cqe_size 64, comp off, flags UAR_PAGE_INDEX, uar_page_index 3
func goldenCases(t *testing.T) map[string][]byte {
	ex := make([]byte, 64)
	n, err := PutExWriteHdr(ex, ExCmdCreateCQ, ExCreateCQSize, 0, ExCreateCQRespSize, 0, 0x7f0000003000)
	require.NoError(t, err)
	_, err = (&ExCreateCQ{UserHandle: 1, CQE: 63, CompChannel: NoCompChannel, Flags: 1}).Encode(ex[CmdHdrSize+ExCmdHdrSize:])
	require.NoError(t, err)

	uar := MLX5UARAlloc{Type: MLX5UARTypeNC, MmapOffset: 0x7f0000004000, MmapLength: 0x7f0000004008, PageID: 0x7f000000400c}
	ur, err := uar.Encode(make([]byte, 256))
	require.NoError(t, err)

	core := make([]byte, 8)
	_, _ = (&AllocPD{Response: 0x7f0000002000}).Encode(core)
	iw := InvokeWrite{Cmd: CmdAllocPD, CoreInLen: 8, CoreInline: core, CoreOut: 0x7f0000005000, CoreOutLen: AllocPDRespSize,
		UHWOut: 0x7f0000005004, UHWOutLen: MLX5AllocPDRespSize}
	ir, err := iw.Encode(make([]byte, 256), DriverMLX5)
	require.NoError(t, err)

	db := make([]byte, 64)
	dn, err := RXEDoorbell(db, 4, 0x7f0000006000)
	require.NoError(t, err)

	gc := GetContextIoctl{NumCompVectors: 0x7f0000007000, CoreSupport: 0x7f0000007008, UHWIn: 0x7f0000007100,
		UHWInLen: MLX5AllocUcontextReqV2Size, UHWOut: 0x7f0000007200, UHWOutLen: MLX5AllocUcontextRespSize}
	gr, err := gc.Encode(make([]byte, 256), DriverMLX5)
	require.NoError(t, err)
	dr, err := Destroy(make([]byte, 256), ObjectCQ, 2, 0x7f0000008000, DriverRXE)
	require.NoError(t, err)
	ar, err := AsyncEventAlloc(make([]byte, 64), DriverRXE)
	require.NoError(t, err)

	var dgid [16]byte
	copy(dgid[:], peerIPv4)
	return map[string][]byte{
		"get_context_mlx5": writeCmd(t, CmdGetContext, GetContextRespSize+MLX5AllocUcontextRespSize,
			&GetContext{Response: 0x7f0000001000},
			&MLX5AllocUcontextReqV2{TotalNumBFRegs: 16, NumLowLatencyBFRegs: 4, Flags: MLX5AllocUctxDevX, MaxCQEVersion: 1, LibCaps: dynUAR}),
		"alloc_pd": writeCmd(t, CmdAllocPD, AllocPDRespSize+MLX5AllocPDRespSize, &AllocPD{Response: 0x7f0000002000}),
		"reg_mr": writeCmd(t, CmdRegMR, RegMRRespSize, &RegMR{Response: 0x7f0000002100, Start: 0x7f1234560000, Length: 65536,
			HCAVA: 0x7f1234560000, PDHandle: 1, AccessFlags: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead}),
		"create_cq_mlx5": writeCmd(t, CmdCreateCQ, CreateCQRespSize+MLX5CreateCQRespSize,
			&CreateCQ{Response: 0x7f0000002200, UserHandle: 0xdeadbeef, CQE: 255, CompChannel: NoCompChannel},
			&MLX5CreateCQ{BufAddr: 0x7f0000100000, DBAddr: 0x7f0000200000, CQESize: 64, Flags: MLX5CreateCQFlagUARPageIndex, UARPageIndex: 3}),
		"create_qp_rc_mlx5": writeCmd(t, CmdCreateQP, CreateQPRespSize+MLX5CreateQPRespSize,
			&CreateQP{Response: 0x7f0000002300, UserHandle: 0x42, PDHandle: 1, SendCQHandle: 2, RecvCQHandle: 2, MaxSendWR: 64,
				MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 60, QPType: QPTypeRC},
			&MLX5CreateQP{BufAddr: 0x7f0000300000, DBAddr: 0x7f0000200040, SQWQECount: 256, RQWQECount: 32, RQWQEShift: 4,
				Flags: MLX5QPFlagBFRegIndex | MLX5QPFlagUARPageIndex, UIdx: 0xffffff, BFRegIndex: 5}),
		"modify_qp_rtr": writeCmd(t, CmdModifyQP, 0, &ModifyQP{
			Dest:     QPDest{DGID: dgid, SGIDIndex: 1, HopLimit: 64, IsGlobal: 1, PortNum: 1},
			QPHandle: 3, AttrMask: rtrMask, RQPSN: 0x123456, DestQPNum: 0x11, QPState: QPStateRTR, PathMTU: MTU1024,
			MaxDestRdAtomic: 16, MinRNRTimer: 12}),
		"req_notify_cq":               writeCmd(t, CmdReqNotifyCQ, 0, &ReqNotifyCQ{CQHandle: 2, SolicitedOnly: 1}),
		"destroy_qp":                  writeCmd(t, CmdDestroyQP, DestroyQPRespSize, &DestroyQP{Response: 0x7f0000002400, QPHandle: 3}),
		"ex_create_cq":                ex[:n],
		"ioctl_mlx5_uar_alloc":        ur.Bytes(),
		"ioctl_invoke_write_alloc_pd": ir.Bytes(),
		"rdma_verbs_ioctl":            {0x01, 0x1b, 0x18, 0xc0},
		"rxe_post_send_doorbell":      db[:dn],
		"ioctl_get_context_mlx5":      gr.Bytes(),
		"ioctl_destroy_cq_rxe":        dr.Bytes(),
		"ioctl_async_event_alloc":     ar.Bytes(),
	}
}

func TestGoldenEncode(t *testing.T) {
	g := loadGolden(t)
	cases := goldenCases(t)
	require.Len(t, cases, len(g), "every golden vector has a Go case and back")
	for name, want := range g {
		t.Run(name, func(t *testing.T) {
			got, ok := cases[name]
			require.True(t, ok, "no Go case for %s", name)
			require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(got))
		})
	}
}

// The C bytes parse as the kernel would and decode to the fields C set.
func TestGoldenDecode(t *testing.T) {
	g := loadGolden(t)

	m, err := ParseWrite(g["create_qp_rc_mlx5"])
	require.NoError(t, err)
	require.Equal(t, CmdCreateQP, m.Cmd)
	require.Equal(t, CreateQPRespSize+MLX5CreateQPRespSize, m.OutLen)
	var qp CreateQP
	require.NoError(t, qp.Decode(m.Core))
	require.Equal(t, QPTypeRC, qp.QPType)
	require.EqualValues(t, 60, qp.MaxInlineData)
	var drv MLX5CreateQP
	require.NoError(t, drv.Decode(m.Driver))
	require.EqualValues(t, 0xffffff, drv.UIdx)
	require.EqualValues(t, 5, drv.BFRegIndex)

	m, err = ParseWrite(g["modify_qp_rtr"])
	require.NoError(t, err)
	var mod ModifyQP
	require.NoError(t, mod.Decode(m.Core))
	require.Equal(t, rtrMask, mod.AttrMask)
	require.Equal(t, QPStateRTR, mod.QPState)
	require.Equal(t, peerIPv4, string(mod.Dest.DGID[:]))
	require.NoError(t, CheckTransition(QPTypeRC, QPStateInit, mod.QPState, mod.AttrMask))

	m, err = ParseWrite(g["ex_create_cq"])
	require.NoError(t, err)
	require.True(t, m.Extended)
	var cq ExCreateCQ
	require.NoError(t, cq.Decode(m.Core))
	require.Equal(t, NoCompChannel, cq.CompChannel)

	h, err := ParseIoctl(g["ioctl_mlx5_uar_alloc"])
	require.NoError(t, err)
	require.Equal(t, MLX5ObjectUAR, h.ObjectID())
	a, ok := h.FindAttr(MLX5AttrUARObjAllocPageID)
	require.True(t, ok)
	require.EqualValues(t, 0x7f000000400c, a.Data())

	h, err = ParseIoctl(g["ioctl_invoke_write_alloc_pd"])
	require.NoError(t, err)
	in, ok := h.Attr(1).Inline()
	require.True(t, ok)
	var pd AllocPD
	require.NoError(t, pd.Decode(in))
	require.EqualValues(t, 0x7f0000002000, pd.Response)
}

// With gcc and the headers present, the committed golden file is what the
// generator writes today (so an edit to gen_golden.c cannot go stale).
func TestGoldenUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s): %v", cc, err)
	}
	if _, err := os.Stat("/usr/include/rdma/ib_user_verbs.h"); err != nil {
		t.Skip("no uapi headers in /usr/include/rdma (apt-get install linux-libc-dev)")
	}
	out := filepath.Join(t.TempDir(), "golden.txt")
	cmd := exec.Command("sh", "testdata/gen_golden.sh", out)
	cmd.Env = append(os.Environ(), "CC="+cc)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	fresh, err := os.ReadFile(out)
	require.NoError(t, err)
	committed, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	require.Equal(t, parseGolden(t, committed), parseGolden(t, fresh), "regenerate with testdata/gen_golden.sh")
}

func init() {
	data, err := os.ReadFile(goldenPath)
	if err != nil {
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if b, err := hex.DecodeString(f[1]); err == nil {
			goldenSeed[f[0]] = b
		}
	}
}
