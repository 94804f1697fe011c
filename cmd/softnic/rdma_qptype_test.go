package main

// softnic rdma --qp-type rc|uc|ud: flag parsing, the UD LOCAL and REMOTE
// lines, the commands each QP type refuses, the UD SEND through the
// address handle and the UD receive's WC line (src_qp, grh) and GRH area.

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/wire"
)

func TestRDMAQPTypeFlags(t *testing.T) {
	base := func() rdmaOpts {
		return rdmaOpts{mtu: 1024, mrSize: 1 << 20, recvOff: -1, recvDepth: 16, gidIndex: 1, timeout: 16, retryCnt: 6, rnrRetry: 6, waitMS: 1000}
	}
	tests := []struct {
		qpType, qkey, remoteQKey string
		want                     provider.QPType
		wantQKey                 uint32
		err                      string
	}{
		{qpType: "", want: provider.QPTypeRC, wantQKey: defaultQKey},
		{qpType: "rc", want: provider.QPTypeRC, wantQKey: defaultQKey},
		{qpType: "UC", want: provider.QPTypeUC, wantQKey: defaultQKey},
		{qpType: "ud", qkey: "0x22220001", remoteQKey: "33", want: provider.QPTypeUD, wantQKey: 0x22220001},
		{qpType: "xrc", err: `--qp-type "xrc": want rc, uc or ud`},
		{qpType: "ud", qkey: "1ffffffff", err: "--qkey:"},
		{qpType: "ud", qkey: "zz", err: "--qkey:"},
		{qpType: "ud", remoteQKey: "-1", err: "--remote-qkey:"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%s/%s", tc.qpType, tc.qkey, tc.remoteQKey), func(t *testing.T) {
			o := base()
			o.qpType, o.qkey, o.remoteQKey = tc.qpType, tc.qkey, tc.remoteQKey
			err := o.validate()
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			typ, q, err := o.parsed()
			require.NoError(t, err)
			require.Equal(t, tc.want, typ)
			require.Equal(t, tc.wantQKey, q)
		})
	}
	// The command line: --qp-type is a flag of its own; a bad one is a
	// usage error before anything opens.
	var out, errb strings.Builder
	require.Equal(t, 2, run([]string{"rdma", "--qp-type", "xrc", "--wire", "udp:127.0.0.1:0,127.0.0.1:9", "--ip", "192.0.2.1"}, &out, &errb))
	require.Contains(t, errb.String(), `--qp-type "xrc"`)
	out.Reset()
	run([]string{"rdma", "--help"}, &out, &out)
	for _, s := range []string{"-qp-type", "-qkey", "-remote-qkey", "src_qp=", "grh=<0|1>", "dump OFF LEN", "not supported on a <type> QP"} {
		require.Contains(t, out.String(), s)
	}
}

// The REMOTE line: a Q_Key is a fifth field on UD only.
func TestRDMARemoteLine(t *testing.T) {
	const gid = "00000000000000000000ffffc0000202"
	tests := []struct {
		line string
		ud   bool
		want remoteInfo
		err  string
	}{
		{line: "REMOTE 11 2a", want: remoteInfo{qpn: 0x11, psn: 0x2a, qkey: 7}},
		{line: "REMOTE 11 2a " + gid, want: remoteInfo{qpn: 0x11, psn: 0x2a, ip: testPeer, qkey: 7}},
		{line: "REMOTE 11 2a " + gid + " 22220001", err: "expected REMOTE <qpn> <psn> [<gid>]"},
		{line: "REMOTE 11 2a " + gid + " 22220001", ud: true, want: remoteInfo{qpn: 0x11, psn: 0x2a, ip: testPeer, qkey: 0x22220001}},
		{line: "REMOTE 11 2a " + gid, ud: true, want: remoteInfo{qpn: 0x11, psn: 0x2a, ip: testPeer, qkey: 7}},
		{line: "REMOTE 11 2a " + gid + " 22220001 5", ud: true, err: "expected REMOTE <qpn> <psn> [<gid> [<qkey>]]"},
		{line: "REMOTE 11 2a " + gid + " 1ffffffff", ud: true, err: "Q_Key"},
		{line: "REMOTE 11 2a ffff 1", ud: true, err: "GID"},
		// QPN and PSN are 24 bits: wider ones are refused, not truncated.
		{line: "REMOTE ffffff ffffff", want: remoteInfo{qpn: 0xffffff, psn: 0xffffff, qkey: 7}},
		{line: "REMOTE 1000000 10", err: `QPN: "1000000" does not fit in 24 bits`},
		{line: "REMOTE 100 ffffffff", err: `PSN: "ffffffff" does not fit in 24 bits`},
		{line: "REMOTE 100 0x1000000", err: `PSN: "0x1000000" does not fit in 24 bits`},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v/%s", tc.ud, tc.line), func(t *testing.T) {
			r := remoteInfo{qkey: 7}
			err := r.parseLine(tc.line, tc.ud)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, r)
		})
	}
}

// LOCAL carries the Q_Key on UD only; the REMOTE line's Q_Key is the one
// sends use (here against the discard port: nothing answers, and a UD or
// UC send completes once it is on the wire).
func TestRDMAQPTypesInProcess(t *testing.T) {
	const gid = "00000000000000000000ffffc0000202"
	tests := []struct {
		name   string
		extra  []string
		script []string
		want   []string // the lines after LOCAL; "*" ends a prefix
	}{
		{
			name:  "UD",
			extra: []string{"qp-type", "ud", "qkey", "22220001"},
			script: []string{"REMOTE 11 0 " + gid + " 33330001", "write 0 0 8 1", "read 0 0 8", "fadd 0 0 1", "cas 0 0 1 2",
				"send 8 1", "send 8 1 44440001", "send 8", "send 8 1 100000000", "dump 0 8", "dump 0 0", "dump 0 4097", "dump 0 0x1001", "dump 0 010"},
			want: []string{
				"ERR write is not supported on a UD QP", "ERR read is not supported on a UD QP",
				"ERR fadd is not supported on a UD QP", "ERR cas is not supported on a UD QP",
				"WC 5 SUCCESS SEND 0 0", "WC 6 SUCCESS SEND 0 0",
				"ERR usage: send LEN SEED [QKEY]", "ERR QKEY is 32-bit",
				"DUMP 0 8 2101c54fd1d01ab2", "DUMP 0 0 -", "ERR dump of 4097 bytes: at most 4096", "ERR dump of 4097 bytes: at most 4096",
				"DUMP 0 10 2101c54fd1d01ab20000", // 010: ten bytes, not octal 8
			},
		},
		{
			name:   "UC",
			extra:  []string{"qp-type", "uc"},
			script: []string{"REMOTE 11 0", "read 0 0 8", "fadd 0 0 1", "cas 0 0 1 2", "write 7f0000000000 1 100 1", "send 10 2", "send 10 2 3"},
			want: []string{
				"ERR read is not supported on a UC QP", "ERR fadd is not supported on a UC QP", "ERR cas is not supported on a UC QP",
				"WC 5 SUCCESS RDMA_WRITE 0 0", "WC 6 SUCCESS SEND 0 0", "ERR usage: send LEN SEED",
			},
		},
		{
			name:   "RC refuses nothing, times out without a peer",
			extra:  []string{"qp-type", "rc"},
			script: []string{"REMOTE 11 0 " + gid, "read 7f0000000000 1 8"},
			want:   []string{"ERR timed out after 100ms waiting for the RDMA_READ completion of wr_id 5 *"},
		},
		{
			name:   "RC REMOTE with a Q_Key",
			extra:  []string{"qp-type", "rc"},
			script: []string{"REMOTE 11 0 " + gid + " 1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := runRDMAInProcess(t, strings.Join(tc.script, "\n")+"\nquit\n", append([]string{"psn", "abc"}, tc.extra...)...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			local := "LOCAL 000100 000abc 00000000000000000000ffffc0000201"
			if tc.extra[1] == "ud" {
				local += " 22220001"
			}
			require.Equal(t, local, lines[0])
			if tc.want == nil {
				require.ErrorContains(t, err, "expected REMOTE <qpn> <psn> [<gid>]", "RC takes no Q_Key")
				return
			}
			require.NoError(t, err, stderr)
			requireLines(t, tc.want, lines[1:])
		})
	}
}

// newTestEPType is newTestEP for a QP type: connected (UD: its AH made) to
// the fake peer at testPeer, QPN fakePeerQPN, Q_Key peerQKey.
func newTestEPType(t *testing.T, typ string, wait time.Duration) (*rdmaEP, *wire.MemTransport, *strings.Builder) {
	t.Helper()
	return newTestEPTypeDepth(t, typ, wait, 4)
}

// newTestEPTypeDepth is newTestEPType with recvDepth receives posted.
func newTestEPTypeDepth(t *testing.T, typ string, wait time.Duration, recvDepth int) (*rdmaEP, *wire.MemTransport, *strings.Builder) {
	t.Helper()
	r, tr, stderr := newTestNet(t, netOpts{neigh: neighFlag{{IP: testPeer, MAC: peerMAC}}, quiet: true})
	out := &strings.Builder{}
	o := rdmaOpts{mtu: 1024, mrSize: 1 << 16, recvOff: -1, recvDepth: recvDepth, gidIndex: 1, timeout: 16, retryCnt: 6, rnrRetry: 6,
		waitMS: int(wait / time.Millisecond), qpType: typ, qkey: "22220001"}
	require.NoError(t, o.validate())
	ptyp, qkey, err := o.parsed()
	require.NoError(t, err)
	ep := &rdmaEP{o: o, typ: ptyp, qkey: qkey, rt: r, out: out, stderr: stderr, psn: ownPSN, wait: wait, posted: map[uint64]string{}}
	require.NoError(t, ep.setup())
	require.NoError(t, ep.connect(remoteInfo{qpn: fakePeerQPN, psn: fakePeerPSN, ip: testPeer, qkey: peerQKey}))
	return ep, tr, out
}

const peerQKey = 0x33330001

// udFrame is a UD SEND ONLY from the fake peer to ep's QP.
func udFrame(t *testing.T, ep *rdmaEP, qkey uint32, payload []byte) []byte {
	fp := &roce.FrameParams{SrcMAC: peerMAC, DstMAC: ethport.DefaultMAC(testIP), SrcIP: testPeer, DstIP: testIP, TTL: 64,
		SrcPort: roce.QPSourcePort(fakePeerQPN),
		BTH:     roce.BTHFields{Opcode: roce.OpUDSendOnly, PKey: roce.DefaultPKey, DestQP: ep.qp.QPN(), PSN: 7},
		DETH:    roce.DETHFields{QKey: qkey, SrcQP: fakePeerQPN}}
	b := make([]byte, 2048)
	n, err := roce.BuildFrame(b, fp, payload)
	require.NoError(t, err)
	return b[:n]
}

// A UD SEND goes through the AH with the peer's QPN and Q_Key in the DETH
// (or the command's QKEY); a UD receive prints src_qp and grh, counts the
// 40-byte GRH area in byte_len, and dump shows the area: 20 zero bytes,
// then the IPv4 header of the frame.
func TestRDMAUDSendAndReceive(t *testing.T) {
	ep, tr, out := newTestEPType(t, "ud", 300*time.Millisecond)
	run := func(cmd string) []string {
		t.Helper()
		out.Reset()
		require.False(t, ep.command(strings.Fields(cmd)))
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	for _, c := range []struct {
		cmd, want string
		qkey      uint32
	}{{"send 64 1", "WC 5 SUCCESS SEND 0 0", peerQKey}, {"send 64 1 44440001", "WC 6 SUCCESS SEND 0 0", 0x44440001}} {
		sent := len(tr.Sent())
		requireLines(t, []string{c.want}, run(c.cmd))
		var pkt roce.Packet
		var found bool
		for _, f := range tr.Sent()[sent:] {
			if roce.ParseFrame(f, &pkt) == nil && pkt.Info != nil {
				found = true
				break
			}
		}
		require.True(t, found, "the SEND went on the wire")
		require.Equal(t, roce.OpUDSendOnly, pkt.Opcode)
		require.Equal(t, uint32(fakePeerQPN), pkt.BTH.DestQP())
		require.Equal(t, c.qkey, pkt.DETH.QKey(), c.cmd)
		require.Equal(t, ep.qp.QPN(), pkt.DETH.SrcQP())
	}

	payload := make([]byte, 100)
	fillSeed(payload, 9)
	tr.Deliver(udFrame(t, ep, 0x22220001, payload))
	got := run("recv 1")
	require.Len(t, got, 1)
	require.Regexp(t, `^WC [0-9a-f]+ SUCCESS RECV 140 0 src_qp=000011 grh=1$`, got[0], "byte_len = 100 + 40")
	recvOff := uint64(ep.o.recvOff)
	got = run(fmt.Sprintf("dump %d 40", recvOff))
	f := strings.Fields(got[0])
	require.Len(t, f, 4, got[0])
	grh, err := hex.DecodeString(f[3])
	require.NoError(t, err)
	require.Equal(t, make([]byte, 20), grh[:20], "20 zero bytes")
	require.Equal(t, byte(0x45), grh[20])
	require.Equal(t, uint16(20+8+12+8+100+4), binary.BigEndian.Uint16(grh[22:]), "IPv4 total length")
	require.Equal(t, byte(17), grh[29])
	require.Equal(t, testPeer.As4(), [4]byte(grh[32:36]))
	require.Equal(t, testIP.As4(), [4]byte(grh[36:40]))
	got = run(fmt.Sprintf("sum %d 100", recvOff+40))
	require.Equal(t, fmt.Sprintf("SUM %d 100 %08x", recvOff+40, crc32.ChecksumIEEE(payload)), got[0])

	// Another Q_Key: dropped, no completion.
	tr.Deliver(udFrame(t, ep, 0x22220002, payload))
	got = run("recv 1")
	require.Contains(t, got[0], "ERR timed out after 300ms waiting for receive completion 1 of 1")
}

// recv N counts in decimal, as rdma-core and perftest do: with 16 SENDs
// waiting, `recv 10` takes ten completions (hex would take all 16), and
// `recv 0x6` the other six.
func TestRDMARecvCountIsDecimal(t *testing.T) {
	ep, tr, out := newTestEPTypeDepth(t, "ud", 300*time.Millisecond, 16)
	run := func(cmd string) []string {
		t.Helper()
		out.Reset()
		require.False(t, ep.command(strings.Fields(cmd)))
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	payload := make([]byte, 8)
	for i := 0; i < 16; i++ {
		tr.Deliver(udFrame(t, ep, 0x22220001, payload))
	}
	for _, c := range []struct {
		cmd  string
		want int
	}{{"recv 10", 10}, {"recv 0x6", 6}} {
		got := run(c.cmd)
		require.Len(t, got, c.want, "%s: %q", c.cmd, got)
		for _, l := range got {
			require.Regexp(t, `^WC [0-9a-f]+ SUCCESS RECV 48 0 src_qp=000011 grh=1$`, l, c.cmd)
		}
	}
	got := run("recv 1")
	require.Len(t, got, 1)
	require.Contains(t, got[0], "ERR timed out after 300ms waiting for receive completion 1 of 1", "all 16 taken")
}
