package device_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/provider"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/testbed"
)

// FuzzReceiveUD aims UD frames with arbitrary DETHs (Q_Key, source QPN),
// opcodes, PSNs and payload lengths at a live UD QP with receives posted.
// Each 8-byte record is one frame. The device must not panic, must write
// only into the posted receive buffers (a guard buffer stays untouched),
// and the QP must still receive a well-formed SEND afterwards.
func FuzzReceiveUD(f *testing.F) {
	f.Add([]byte{0, 0x11, 0x11, 0x11, 0x11, 0, 0, 10})      // the right Q_Key
	f.Add([]byte{0, 0x11, 0x11, 0x11, 0x12, 0, 0, 10})      // a wrong one
	f.Add([]byte{1, 0x80, 0, 0, 0, 0, 0x10, 0xff})          // SEND_ONLY_IMM, high-bit Q_Key, long
	f.Add([]byte{2, 0x11, 0x11, 0x11, 0x11, 0xff, 0xff, 0}) // an RC opcode at a UD QP
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 8*128 {
			return
		}
		w, err := testbed.New(testbed.DefaultConfig())
		if err != nil {
			t.Fatal(err) // the default world always builds: a failure here is a bug, not bad input
		}
		defer w.Close()
		eps, err := w.ConnectRC(testbed.ConnOpts{Type: provider.QPTypeUD, BufSize: 64 << 10, RQDepth: 16})
		if err != nil {
			t.Fatal(err)
		}
		req, rsp := eps[0], eps[1]
		guard, err := rsp.Host.Ctx.AllocBuffer(4096, 4096)
		if err != nil {
			t.Fatal(err)
		}
		for i := range guard.Bytes {
			guard.Bytes[i] = byte(i)
		}
		want := append([]byte(nil), guard.Bytes...)
		recvs := make([]provider.RecvWR, 8)
		for i := range recvs {
			recvs[i] = provider.RecvWR{WRID: uint64(i), SGL: []provider.SGE{rsp.MR.SGE(uint64(i)*4200, 4200)}}
		}
		if _, err := rsp.QP.PostRecv(recvs); err != nil {
			t.Fatal(err)
		}
		ops := []roce.Opcode{roce.OpUDSendOnly, roce.OpUDSendOnlyImm, roce.OpRCSendOnly, roce.OpUCSendOnly, 0x66, 0x7f}
		buf := make([]byte, 5000)
		payload := make([]byte, 4200)
		for len(data) >= 8 {
			r := data[:8]
			data = data[8:]
			n := int(r[7]) * 17
			fp := roce.FrameParams{SrcMAC: testbed.MACs[0], DstMAC: testbed.MACs[1], SrcIP: testbed.IPs[0], DstIP: testbed.IPs[1], TTL: 64,
				BTH:  roce.BTHFields{Opcode: ops[int(r[0])%len(ops)], PKey: 0xffff, DestQP: rsp.QP.QPN(), PSN: roce.PSN(binary.BigEndian.Uint16(r[5:7]))},
				DETH: roce.DETHFields{QKey: binary.BigEndian.Uint32(r[1:5]), SrcQP: uint32(r[6]) << 8}}
			k, err := roce.BuildFrame(buf, &fp, payload[:min(n, len(payload))])
			if err != nil {
				continue
			}
			w.Hosts[1].Dev.ReceiveFrame(w.Eng.Now(), buf[:k])
		}
		w.Eng.Run(100000)
		// Drain what arrived, then a real SEND must still get through.
		for {
			n, err := rsp.RecvCQ.Poll(make([]provider.WC, 16))
			if err != nil {
				t.Fatalf("poll after fuzz frames: %v", err)
			}
			if n == 0 {
				break
			}
		}
		if _, err := rsp.QP.PostRecv([]provider.RecvWR{{WRID: 100, SGL: []provider.SGE{rsp.MR.SGE(60000, 1000)}}}); err != nil {
			t.Fatalf("post after fuzz frames: %v", err)
		}
		if _, err := req.QP.PostSend([]provider.SendWR{{WRID: 1, Opcode: provider.WRSend, Flags: provider.SendSignaled,
			SGL: []provider.SGE{req.MR.SGE(0, 16)}, AH: req.AH, RemoteQPN: rsp.QP.QPN(), RemoteQKey: rsp.QKey}}); err != nil {
			t.Fatal(err)
		}
		wcs, err := testbed.Wait(rsp.RecvCQ, 1)
		if err != nil {
			t.Fatalf("the UD QP no longer receives: %v", err)
		}
		if wcs[0].Status != provider.WCSuccess || wcs[0].ByteLen != 16+40 {
			t.Fatalf("the probe SEND arrived as %+v", wcs[0])
		}
		if !bytes.Equal(want, guard.Bytes) {
			t.Fatal("memory outside the receive buffers was written")
		}
	})
}
