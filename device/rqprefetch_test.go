package device_test

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/testbed"
)

// rawRQ writes a QP's receive WQEs and doorbell record by hand (as
// FuzzRawRQ does), so that a test can post out of the provider's order
// or move the record where no provider would.
type rawRQ struct {
	ep          *testbed.Endpoint
	base, dbr   uint64
	cnt, stride int
}

func newRawRQ(ep *testbed.Endpoint) *rawRQ {
	in := ep.QP.SQInfo()
	return &rawRQ{ep: ep, base: in.RQAddr, dbr: in.DBRAddr, cnt: in.RQWQEs, stride: in.RQStride}
}

// post writes receive WQE counter i: one SGE of n bytes at off of the MR.
func (r *rawRQ) post(t *testing.T, i int, off uint64, n uint32) {
	t.Helper()
	wqe := make([]byte, r.stride)
	mlx5.DataSeg(wqe).Encode(&mlx5.DataFields{ByteCount: n, LKey: r.ep.MR.LKey, Addr: r.ep.MR.Addr + off})
	if mlx5.DataSegSize < r.stride {
		mlx5.DataSeg(wqe[mlx5.DataSegSize:]).Encode(&mlx5.DataFields{LKey: mlx5.InvalidKey})
	}
	if err := r.ep.Host.Mem.Write(r.base+uint64(i%r.cnt*r.stride), wqe); err != nil {
		t.Fatal(err)
	}
}

// record sets the doorbell record's producer counter.
func (r *rawRQ) record(t *testing.T, v uint16) {
	t.Helper()
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(v))
	if err := r.ep.Host.Mem.Write(r.dbr, b[:]); err != nil {
		t.Fatal(err)
	}
}

func rqCtr(ep *testbed.Endpoint, c interface{ String() string }) uint64 {
	return ep.Host.Dev.Counters().Get(c.String())
}

// sendN posts n signaled 64-byte SENDs, byte i of message k being seed+k.
func sendN(t *testing.T, req *testbed.Endpoint, n int, seed byte) {
	t.Helper()
	for k := range n {
		for i := range 64 {
			req.Buf.Bytes[k*64+i] = seed + byte(k)
		}
		if _, err := req.QP.PostSend([]provider.SendWR{{WRID: uint64(k), Opcode: provider.WRSend, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(uint64(k*64), 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRQRecordBackwards: a doorbell record that moves back while receive
// WQEs are read ahead is a provider bug, counted and ignored (the WQEs
// the device knows are posted stay posted). Before, the read-ahead took
// the lower count as the producer: the next run it read ran from its
// cache's end past that count, into slots never posted, and the device
// later used those stale bytes as the WQEs the provider posted there.
func TestRQRecordBackwards(t *testing.T) {
	cfg := testbed.DefaultConfig()
	cfg.Check = true
	w, err := testbed.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 1024, BufSize: 64 << 10, RQDepth: 8})
	if err != nil {
		t.Fatal(err)
	}
	req, rsp := eps[0], eps[1]
	rq := newRawRQ(rsp)
	for i := range 4 {
		rq.post(t, i, uint64(i)*1024, 1024)
	}
	rq.record(t, 4)
	sendN(t, req, 1, 0x10)
	if _, err := testbed.Wait(req.SendCQ, 1); err != nil {
		t.Fatal(err)
	}
	w.Settle(0)
	rq.record(t, 2) // back, with WQEs 1-3 read ahead
	sendN(t, req, 1, 0x20)
	if _, err := testbed.Wait(req.SendCQ, 1); err != nil {
		t.Fatal(err)
	}
	w.Settle(0)
	if n := rqCtr(rsp, device.CtrRQDBRBad); n == 0 {
		t.Error("the record moving back is not counted")
	}
	// The provider comes to its senses: WQEs 4 and 5, record 6.
	rq.post(t, 4, 4*1024, 1024)
	rq.post(t, 5, 5*1024, 1024)
	rq.record(t, 6)
	sendN(t, req, 4, 0x30)
	wcs, err := testbed.Wait(req.SendCQ, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, wc := range wcs {
		if wc.Status != provider.WCSuccess {
			t.Fatalf("SEND %d: %v", wc.WRID, wc.Status)
		}
	}
	w.Settle(0)
	for i, seed := range []byte{0x10, 0x20, 0x30, 0x31, 0x32, 0x33} {
		if b := rsp.Buf.Bytes[i*1024]; b != seed {
			t.Errorf("WQE %d's buffer holds %#x, want %#x", i, b, seed)
		}
	}
}
