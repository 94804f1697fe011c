package uverbsdev

import (
	"testing"

	"github.com/softnic/softnic/uverbs"
)

// BenchmarkHandleCreateDestroyCQ: CREATE_CQ + DESTROY_CQ as bytes through
// Server.Handle (the daemon's per-command cost without the socket).
func BenchmarkHandleCreateDestroyCQ(b *testing.B) {
	r := newRig(b, 1<<20)
	o := r.build(r.s)
	buf, db := r.alloc(64*64), r.alloc(64)
	create := make([]byte, 128)
	n, err := uverbs.EncodeWrite(create, uverbs.CmdCreateCQ, &uverbs.CreateCQ{Response: 1, CQE: 63, CompChannel: -1},
		&uverbs.MLX5CreateCQ{BufAddr: buf, DBAddr: db, CQESize: 64, Flags: uverbs.MLX5CreateCQFlagUARPageIndex, UARPageIndex: uint16(o.uar)}, 16)
	if err != nil {
		b.Fatal(err)
	}
	create = create[:n]
	destroy := make([]byte, 32)
	resp := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.s.Handle(create, resp[:16]); err != nil {
			b.Fatal(err)
		}
		c := decode[uverbs.CreateCQResp](b, resp)
		d := uverbs.DestroyCQ{Response: 1, CQHandle: c.CQHandle}
		k, _ := uverbs.PutWriteHdr(destroy, uverbs.CmdDestroyCQ, uverbs.DestroyCQSize, uverbs.DestroyCQRespSize)
		_, _ = d.Encode(destroy[uverbs.CmdHdrSize:])
		if _, err := r.s.Handle(destroy[:k], resp[:8]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandleModifyQP: an RTS → RTS MODIFY_QP (access flags).
func BenchmarkHandleModifyQP(b *testing.B) {
	r := newRig(b, 1<<20)
	o := r.build(r.s)
	r.connect(r.s, o.qp)
	req := make([]byte, 128)
	n, err := uverbs.EncodeWrite(req, uverbs.CmdModifyQP, &uverbs.ModifyQP{QPHandle: o.qp, AttrMask: uverbs.QPAttrAccessFlags,
		QPAccessFlags: uverbs.AccessRemoteRead}, nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.s.Handle(req[:n], nil); err != nil {
			b.Fatal(err)
		}
	}
}
