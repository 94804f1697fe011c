package ethport_test

import (
	"testing"

	"github.com/softnic/softnic/ethport"
	"github.com/softnic/softnic/sim"
)

type nopTx struct{}

func (nopTx) Send([]byte) error { return nil }

type nopRx struct{ n int }

func (r *nopRx) ReceiveFrame(sim.Time, []byte) { r.n++ }

// BenchmarkReceiveRoCE: the per-frame filter in front of the device.
func BenchmarkReceiveRoCE(b *testing.B) {
	p, err := ethport.New(sim.NewEngine(), ethport.Config{MAC: ourMAC, IP: ourIP}, nopTx{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	rx := &nopRx{}
	p.Attach(rx)
	f := roceFrame(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		p.ReceiveFrame(0, f)
	}
	if rx.n == 0 {
		b.Fatal("nothing delivered")
	}
}

// BenchmarkAnswerWhoHas: one ARP request in, one reply out.
func BenchmarkAnswerWhoHas(b *testing.B) {
	p, err := ethport.New(sim.NewEngine(), ethport.Config{MAC: ourMAC, IP: ourIP}, nopTx{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	f := arpFrame(ethport.ARPRequest, ethport.Broadcast, peerMAC, peerIP, [6]byte{}, ourIP)
	b.ReportAllocs()
	for b.Loop() {
		p.ReceiveFrame(0, f)
	}
}
