package serve_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// waitWC polls cq for n completions, driving the device through the
// provider's poll, until deadline (wall clock: across processes an idle
// engine is normal while the other process is busy).
func waitWC(cq *provider.CQ, n int, deadline time.Time) ([]provider.WC, error) {
	out := make([]provider.WC, 0, n)
	wcs := make([]provider.WC, 16)
	for len(out) < n {
		k, err := cq.Poll(wcs[:min(len(wcs), n-len(out))])
		if err != nil {
			return out, err
		}
		out = append(out, wcs[:k]...)
		if k == 0 && time.Now().After(deadline) {
			return out, fmt.Errorf("%d of %d completions by the deadline", len(out), n)
		}
	}
	return out, nil
}

// op is one operation of the cross-process suite: what side 0 posts to
// side 1, and how to check it.
type op struct {
	name  string
	wr    func(e [2]*testbed.Endpoint) provider.SendWR
	recv  bool // side 1 consumes a receive
	check func(e [2]*testbed.Endpoint) error
}

const opLen = 256

// pattern fills b with bytes derived from seed.
func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// ops is every RC operation, each checked byte for byte at its target.
var ops = []op{
	{name: "send", recv: true,
		wr: func(e [2]*testbed.Endpoint) provider.SendWR {
			pattern(e[0].Buf.Bytes[:opLen], 1)
			return provider.SendWR{Opcode: provider.WRSend, SGL: []provider.SGE{e[0].MR.SGE(0, opLen)}}
		},
		check: func(e [2]*testbed.Endpoint) error {
			return same(e[1].Buf.Bytes[4096:4096+opLen], e[0].Buf.Bytes[:opLen])
		}},
	{name: "send_imm", recv: true,
		wr: func(e [2]*testbed.Endpoint) provider.SendWR {
			pattern(e[0].Buf.Bytes[:opLen], 2)
			return provider.SendWR{Opcode: provider.WRSendImm, Imm: 0x12345678, SGL: []provider.SGE{e[0].MR.SGE(0, opLen)}}
		},
		check: func(e [2]*testbed.Endpoint) error {
			return same(e[1].Buf.Bytes[4096:4096+opLen], e[0].Buf.Bytes[:opLen])
		}},
	{name: "write",
		wr: func(e [2]*testbed.Endpoint) provider.SendWR {
			pattern(e[0].Buf.Bytes[:opLen], 3)
			return provider.SendWR{Opcode: provider.WRRDMAWrite, SGL: []provider.SGE{e[0].MR.SGE(0, opLen)},
				RemoteAddr: e[1].Buf.Addr + 8192, RKey: e[1].MR.RKey}
		},
		check: func(e [2]*testbed.Endpoint) error {
			return same(e[1].Buf.Bytes[8192:8192+opLen], e[0].Buf.Bytes[:opLen])
		}},
	{name: "write_imm", recv: true,
		wr: func(e [2]*testbed.Endpoint) provider.SendWR {
			pattern(e[0].Buf.Bytes[:opLen], 4)
			return provider.SendWR{Opcode: provider.WRRDMAWriteImm, Imm: 7, SGL: []provider.SGE{e[0].MR.SGE(0, opLen)},
				RemoteAddr: e[1].Buf.Addr + 12288, RKey: e[1].MR.RKey}
		},
		check: func(e [2]*testbed.Endpoint) error {
			return same(e[1].Buf.Bytes[12288:12288+opLen], e[0].Buf.Bytes[:opLen])
		}},
	{name: "read",
		wr: func(e [2]*testbed.Endpoint) provider.SendWR {
			pattern(e[1].Buf.Bytes[16384:16384+opLen], 5)
			return provider.SendWR{Opcode: provider.WRRDMARead, SGL: []provider.SGE{e[0].MR.SGE(20480, opLen)},
				RemoteAddr: e[1].Buf.Addr + 16384, RKey: e[1].MR.RKey}
		},
		check: func(e [2]*testbed.Endpoint) error {
			return same(e[0].Buf.Bytes[20480:20480+opLen], e[1].Buf.Bytes[16384:16384+opLen])
		}},
	{name: "cmp_swap",
		wr: func(e [2]*testbed.Endpoint) provider.SendWR {
			binary.LittleEndian.PutUint64(e[1].Buf.Bytes[24576:], 41) // the responder works on the host word (little-endian on x86)
			return provider.SendWR{Opcode: provider.WRAtomicCmpSwp, SGL: []provider.SGE{e[0].MR.SGE(24576, 8)},
				RemoteAddr: e[1].Buf.Addr + 24576, RKey: e[1].MR.RKey, CompareAdd: 41, Swap: 99}
		},
		check: func(e [2]*testbed.Endpoint) error {
			return want64(e[1].Buf.Bytes[24576:], 99, e[0].Buf.Bytes[24576:], 41)
		}},
	{name: "fetch_add",
		wr: func(e [2]*testbed.Endpoint) provider.SendWR {
			binary.LittleEndian.PutUint64(e[1].Buf.Bytes[28672:], 1000)
			return provider.SendWR{Opcode: provider.WRAtomicFetchAdd, SGL: []provider.SGE{e[0].MR.SGE(28672, 8)},
				RemoteAddr: e[1].Buf.Addr + 28672, RKey: e[1].MR.RKey, CompareAdd: 5}
		},
		check: func(e [2]*testbed.Endpoint) error {
			return want64(e[1].Buf.Bytes[28672:], 1005, e[0].Buf.Bytes[28672:], 1000)
		}},
}

func same(got, want []byte) error {
	if !bytes.Equal(got, want) {
		return fmt.Errorf("data differs: got % x..., want % x...", got[:8], want[:8])
	}
	return nil
}

func want64(target []byte, tv uint64, local []byte, lv uint64) error {
	if g := binary.LittleEndian.Uint64(target); g != tv {
		return fmt.Errorf("remote word %d, want %d", g, tv)
	}
	if g := binary.LittleEndian.Uint64(local); g != lv {
		return fmt.Errorf("fetched %d, want %d", g, lv)
	}
	return nil
}

// runOp posts one op from side 0 and waits for both sides' completions.
func runOp(e [2]*testbed.Endpoint, o op, deadline time.Time) error {
	if o.recv {
		if _, err := e[1].QP.PostRecv([]provider.RecvWR{{WRID: 2, SGL: []provider.SGE{e[1].MR.SGE(4096, 4096)}}}); err != nil {
			return err
		}
	}
	wr := o.wr(e)
	wr.WRID, wr.Flags = 1, provider.SendSignaled
	if _, err := e[0].QP.PostSend([]provider.SendWR{wr}); err != nil {
		return err
	}
	wcs, err := waitWC(e[0].SendCQ, 1, deadline)
	if err != nil {
		return fmt.Errorf("send CQ: %w", err)
	}
	if wcs[0].Status != provider.WCSuccess {
		return fmt.Errorf("send completion %v", wcs[0].Status)
	}
	if o.recv {
		wcs, err := waitWC(e[1].RecvCQ, 1, deadline)
		if err != nil {
			return fmt.Errorf("recv CQ: %w", err)
		}
		if wcs[0].Status != provider.WCSuccess {
			return fmt.Errorf("recv completion %v", wcs[0].Status)
		}
	}
	return o.check(e)
}
