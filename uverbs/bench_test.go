package uverbs

import "testing"

func BenchmarkEncodeCreateQPWrite(b *testing.B) {
	buf := make([]byte, 256)
	req := CreateQP{Response: 0x1000, PDHandle: 1, SendCQHandle: 2, RecvCQHandle: 2, MaxSendWR: 64, QPType: QPTypeRC}
	drv := MLX5CreateQP{BufAddr: 0x10000, DBAddr: 0x20000, SQWQECount: 256, RQWQECount: 32, RQWQEShift: 4}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = PutWriteHdr(buf, CmdCreateQP, CreateQPSize+MLX5CreateQPSize, CreateQPRespSize+MLX5CreateQPRespSize)
		_, _ = req.Encode(buf[CmdHdrSize:])
		_, _ = drv.Encode(buf[CmdHdrSize+CreateQPSize:])
	}
}

func BenchmarkParseDecodeModifyQP(b *testing.B) {
	buf := make([]byte, 256)
	req := ModifyQP{QPHandle: 3, AttrMask: QPAttrState | QPAttrSQPSN, QPState: QPStateRTS}
	n, _ := PutWriteHdr(buf, CmdModifyQP, ModifyQPSize, 0)
	_, _ = req.Encode(buf[CmdHdrSize:])
	var m ModifyQP
	b.ReportAllocs()
	for b.Loop() {
		w, err := ParseWrite(buf[:n])
		if err != nil || m.Decode(w.Core) != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckTransition(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if CheckTransition(QPTypeRC, QPStateInit, QPStateRTR, rtrMask) != nil {
			b.Fatal("refused")
		}
	}
}
