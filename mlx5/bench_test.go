package mlx5

import "testing"

// The views sit on the provider's post/poll path and the device's WQE and
// CQE path: they must not allocate.

var sinkCQE CQEFields
var sinkCtrl CtrlFields
var sinkBool bool

func BenchmarkWQEBuildWrite(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, WQEBBSize)
	ctrl := CtrlFields{Opcode: OpRDMAWrite, QPN: 0x123, DS: 3, FMCESE: CECQUpdate}
	raddr := RaddrFields{RAddr: 0x7f0012345678, RKey: 0xabcdef01}
	data := DataFields{ByteCount: 4096, LKey: 0x1234, Addr: 0x7f00deadbeef}
	for i := 0; b.Loop(); i++ {
		ctrl.WQEIndex = uint16(i)
		CtrlSeg(buf).Encode(&ctrl)
		RaddrSeg(buf[CtrlSegSize:]).Encode(&raddr)
		DataSeg(buf[CtrlSegSize+RaddrSegSize:]).Encode(&data)
	}
}

func BenchmarkCtrlSegFields(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, CtrlSegSize)
	CtrlSeg(buf).Encode(&CtrlFields{Opcode: OpSend, QPN: 0x42, DS: 2})
	for b.Loop() {
		sinkCtrl = CtrlSeg(buf).Fields()
	}
}

func BenchmarkCQE64Encode(b *testing.B) {
	b.ReportAllocs()
	buf := make(CQE64, CQE64Size)
	f := CQEFields{Opcode: CQERespSendImm, Imm: 0xdeadbeef, ByteCnt: 15, QPN: 0x42, WQECounter: 3}
	for i := 0; b.Loop(); i++ {
		f.Owner = CQEOwnerBit(uint32(i), 256)
		buf.Encode(&f)
	}
}

func BenchmarkCQEPoll(b *testing.B) {
	b.ReportAllocs()
	buf := make(CQE64, CQE64Size)
	buf.Encode(&CQEFields{Opcode: CQEReq, Owner: true, QPN: 0x42, WQECounter: 3})
	for b.Loop() {
		if sinkBool = CQEOwnedBySW(buf, 256, 256); sinkBool {
			sinkCQE = buf.Fields()
		}
	}
}

func TestViewsDoNotAllocate(t *testing.T) {
	wqe := make([]byte, WQEBBSize)
	cqe := make(CQE64, CQE64Size)
	f := CQEFields{Opcode: CQEReq, QPN: 1}
	allocs := testing.AllocsPerRun(100, func() {
		CtrlSeg(wqe).Encode(&CtrlFields{Opcode: OpSend, DS: 2})
		DataSeg(wqe[16:]).Encode(&DataFields{ByteCount: 1})
		sinkCtrl = CtrlSeg(wqe).Fields()
		cqe.Encode(&f)
		sinkCQE = cqe.Fields()
		sinkBool = CQEOwnedBySW(cqe, 0, 8)
	})
	if allocs != 0 {
		t.Fatalf("views allocate %v times per WQE+CQE", allocs)
	}
}
