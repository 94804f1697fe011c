package interop

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The harness's reading of the line protocol (it runs without the guest):
// WC lines carry the wr_id, LATE lines are set aside rather than taken for
// the awaited completion, ORIG carries 16 hex digits.
func TestLineProtocolParsing(t *testing.T) {
	tests := []struct {
		name    string
		output  string
		want    wc
		late    []string
		orig    uint64
		wantErr string
	}{
		{name: "plain", output: "WC 5 SUCCESS RDMA_WRITE 0 0\n",
			want: wc{wrID: 5, status: "SUCCESS", opcode: "RDMA_WRITE"}},
		{name: "receive with length and imm", output: "WC 1a SUCCESS RECV 1025 1234abcd\n",
			want: wc{wrID: 0x1a, status: "SUCCESS", opcode: "RECV", byteLen: 1025, imm: 0x1234abcd}},
		{name: "late lines skipped", output: "LATE WC 5 SUCCESS RDMA_WRITE 0 0\nLATE WC 6 WR_FLUSH_ERR SEND 0 0\nWC 7 SUCCESS FETCH_ADD 8 0\nORIG 0x1122334455667788\n",
			want: wc{wrID: 7, status: "SUCCESS", opcode: "FETCH_ADD", byteLen: 8},
			late: []string{"LATE WC 5 SUCCESS RDMA_WRITE 0 0", "LATE WC 6 WR_FLUSH_ERR SEND 0 0"}, orig: 0x1122334455667788},
		{name: "noise between", output: "verbs_peer: hello\nWC 2 REM_ACCESS_ERR RDMA_WRITE 0 0\n",
			want: wc{wrID: 2, status: "REM_ACCESS_ERR", opcode: "RDMA_WRITE"}},
		{name: "UD receive", output: "WC 3 SUCCESS RECV 140 0 src_qp=000011 grh=1\n",
			want: wc{wrID: 3, status: "SUCCESS", opcode: "RECV", byteLen: 140, ud: true, srcQP: 0x11, grh: true}},
		{name: "UD receive without GRH", output: "WC 3 WR_FLUSH_ERR RECV 0 0 src_qp=000000 grh=0\n",
			want: wc{wrID: 3, status: "WR_FLUSH_ERR", opcode: "RECV", ud: true}},
		{name: "UD fields misspelt", output: "WC 3 SUCCESS RECV 140 0 srcqp=11 grh=1\n", wantErr: "bad UD fields"},
		{name: "UD grh not a flag", output: "WC 3 SUCCESS RECV 140 0 src_qp=11 grh=yes\n", wantErr: "bad UD fields"},
		{name: "seven fields", output: "WC 3 SUCCESS RECV 140 0 src_qp=11\n", wantErr: "want WC <wr_id>"},
		{name: "old five-field WC", output: "WC SUCCESS RDMA_WRITE 0 0\n", wantErr: "want WC <wr_id>"},
		{name: "timeout", output: "ERR timed out after 20000ms waiting for the RDMA_WRITE completion of wr_id 9\n", wantErr: "want WC"},
		{name: "bad wr_id", output: "WC zz SUCCESS SEND 0 0\n", wantErr: "bad WC line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newLinePeer("peer", strings.NewReader(tc.output), io.Discard)
			got, err := p.completion(time.Second)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.late, p.Late())
			if tc.orig != 0 {
				o, err := p.orig(time.Second)
				require.NoError(t, err)
				require.Equal(t, tc.orig, o)
			}
		})
	}
	for name, line := range map[string]string{"no 0x": "ORIG 1122334455667788", "short": "ORIG 0x11", "two": "ORIG 0x0000000000000001 2"} {
		t.Run("orig "+name, func(t *testing.T) {
			_, err := newLinePeer("peer", strings.NewReader(line+"\n"), io.Discard).orig(time.Second)
			require.Error(t, err)
		})
	}
	require.Equal(t, uint64(0xb21ad0d14fc50121), seedWord(1), "seed 1's first 8 bytes, little-endian")
}

// LOCAL carries a Q_Key on UD, REMOTE passes it on with the GID; DUMP and
// EVENTS replies parse.
func TestLineProtocolUDAndEvents(t *testing.T) {
	const gid = "00000000000000000000ffffc0000202"
	for _, tc := range []struct {
		line string
		want endpoint
		err  bool
	}{
		{line: "LOCAL 000011 00abcd " + gid, want: endpoint{qpn: 0x11, psn: 0xabcd, gid: gid}},
		{line: "LOCAL 000011 00abcd " + gid + " 22220001", want: endpoint{qpn: 0x11, psn: 0xabcd, gid: gid, qkey: 0x22220001, hasQKey: true}},
		{line: "LOCAL 000011 00abcd " + gid + " 122220001", err: true},
		{line: "LOCAL 000011 00abcd " + gid + " 1 2", err: true},
		{line: "LOCAL 000011 00abcd ffff", err: true},
	} {
		e, err := parseLocal("peer", strings.Fields(tc.line))
		if tc.err {
			require.Error(t, err, tc.line)
			continue
		}
		require.NoError(t, err, tc.line)
		require.Equal(t, tc.want, e)
	}
	require.Equal(t, "REMOTE 11 abcd", remoteLine(endpoint{qpn: 0x11, psn: 0xabcd, gid: gid}))
	require.Equal(t, "REMOTE 11 abcd "+gid+" 22220001", remoteLine(endpoint{qpn: 0x11, psn: 0xabcd, gid: gid, qkey: 0x22220001, hasQKey: true}))

	var sent strings.Builder
	p := newLinePeer("peer", strings.NewReader("DUMP 524288 4 00004500\nDUMP 0 0 -\nEVENTS 3 3 16\nERR read is not supported on a UD QP\nDUMP 0 2 00\n"+
		"DUMP 80000 4 00004500\n"), &sent)
	b, err := p.dump(0x80000, 4, time.Second)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 0, 0x45, 0}, b)
	b, err = p.dump(0, 0, time.Second)
	require.NoError(t, err)
	require.Empty(t, b)
	ev, err := p.events(time.Second)
	require.NoError(t, err)
	require.Equal(t, cqEvents{events: 3, acked: 3, sleeps: 16}, ev, "counts are decimal")
	require.NoError(t, p.refused("read 0 0 8", "not supported on a UD QP", time.Second))
	_, err = p.dump(0, 2, time.Second)
	require.ErrorContains(t, err, "want 2 bytes")
	_, err = p.dump(0x80000, 4, time.Second)
	require.ErrorContains(t, err, "want DUMP 524288 4", "a peer echoing the range in hex")
	require.Equal(t, "dump 524288 4\ndump 0 0\nevents\nread 0 0 8\ndump 0 2\ndump 524288 4\n", sent.String())
}

// The commands the harness sends and the replies it reads follow the
// protocol's numbers: identifiers hex, sizes, counts, offsets and seeds
// decimal (`recv 10` is ten completions). A reply echoing a range in hex
// is refused.
func TestLineProtocolNumbers(t *testing.T) {
	var sent strings.Builder
	p := newLinePeer("peer", strings.NewReader("MR 7f0000000000 136 1048576\nSUM 65536 5000 1d741aea\nSUM 10000 1388 1d741aea\n"), &sent)
	m, err := p.mr(time.Second)
	require.NoError(t, err)
	require.Equal(t, mrInfo{addr: 0x7f0000000000, rkey: 0x136, size: 1 << 20}, m)
	c, err := p.sum(0x10000, 5000, time.Second)
	require.NoError(t, err)
	require.Equal(t, uint32(0x1d741aea), c)
	_, err = p.sum(0x10000, 5000, time.Second)
	require.ErrorContains(t, err, "want SUM 65536 5000 <crc>")

	require.NoError(t, p.write(0x7f0000010000, 0x136, 5000, 17))
	require.NoError(t, p.read(0x7f0000010000, 0x136, 4096))
	require.NoError(t, p.sendMsg(1024, 10))
	require.NoError(t, p.sendQKey(64, 1, 0x22220001))
	require.NoError(t, p.fetchAdd(0x7f0000020000, 0x136, 16))
	require.NoError(t, p.cmpSwap(0x7f0000020000, 0x136, 10, 20))
	require.NoError(t, p.recv(10))
	require.Equal(t, strings.Join([]string{
		"mr",
		"sum 65536 5000",
		"sum 65536 5000",
		"write 7f0000010000 136 5000 17",
		"read 7f0000010000 136 4096",
		"send 1024 10",
		"send 64 1 22220001",
		"fadd 7f0000020000 136 16",
		"cas 7f0000020000 136 10 20",
		"recv 10",
	}, "\n")+"\n", sent.String())
}
