package device_test

import (
	"testing"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/testbed"
)

// FuzzReceiveFrame hands arbitrary frames to a connected responder and then
// to the requester. The device must never panic; whatever it makes of the
// frame it answers like hardware (drop, NAK, error) and keeps running.
func FuzzReceiveFrame(f *testing.F) {
	// Seeds: one well-formed frame per request/response opcode.
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 256})
	if err != nil {
		f.Fatal(err)
	}
	for _, op := range []roce.Opcode{roce.OpRCSendOnly, roce.OpRCSendFirst, roce.OpRCSendLastImm, roce.OpRCWriteOnly,
		roce.OpRCWriteFirst, roce.OpRCWriteOnlyImm, roce.OpRCReadRequest, roce.OpRCReadResponseOnly, roce.OpRCAck,
		roce.OpRCSendOnlyInv, roce.OpRCSendLastInv} {
		p := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1], TTL: 64,
			BTH:  roce.BTHFields{Opcode: op, PKey: 0xffff, DestQP: eps[1].QP.QPN(), PSN: 0x1000, AckReq: true},
			RETH: roce.RETHFields{VA: eps[1].MR.Addr, RKey: eps[1].MR.RKey, DMALen: 16},
			AETH: roce.AETHFields{Syndrome: 0x1f}, InvRKey: eps[1].MR.RKey}
		buf := make([]byte, 512)
		n, err := roce.BuildFrame(buf, &p, make([]byte, 16))
		if err == nil {
			f.Add(buf[:n], false)
			f.Add(buf[:n], true)
		}
	}
	w.Close()
	f.Fuzz(func(t *testing.T, frame []byte, toRequester bool) {
		w, err := testbed.New(testbed.DefaultConfig())
		if err != nil {
			t.Fatal(err) // the default world always builds: a failure here is a bug, not bad input
		}
		defer w.Close()
		eps, err := w.ConnectRC(testbed.ConnOpts{MTU: 256, BufSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		// Patch the BTH destination QP so that frames reach a real QP.
		node := 1
		if toRequester {
			node = 0
		}
		var p roce.Packet
		if roce.ParseFrame(frame, &p) == nil {
			p.BTH.SetDestQP(eps[node].QP.QPN())
		}
		w.Hosts[node].Dev.ReceiveFrame(w.Eng.Now(), frame)
		w.Eng.Run(100000)
	})
}
