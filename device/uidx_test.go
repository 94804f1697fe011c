package device

import (
	"encoding/binary"
	"testing"

	"github.com/softnic/softnic/mlx5"
)

// TestCQEUserIndex: with CQE version 1 libmlx5 finds the QP of every CQE
// (and through it a QP's SRQ) by srqn_uidx, the user index it passed at
// CREATE_QP, not by the QPN: a CQE must carry the QP's index there. A
// QP created without one keeps 0.
func TestCQEUserIndex(t *testing.T) {
	for _, c := range []struct {
		name string
		uidx uint32
		want uint32
	}{
		{"uidx_0x1234", 0x1234, 0x1234},
		{"uidx_0", 0, 0},
		{"uidx_24_bits", 0x3abcdef, 0xabcdef},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, mem, cmd := bareDevice(t, "uidx", 1<<20)
			qdbr := cmd.DBAddr
			cmd.UIdx = c.uidx
			r, err := d.CreateQP(cmd)
			if err != nil {
				t.Fatal(err)
			}
			// One receive posted; ERR flushes it with a CQE.
			var rec [4]byte
			binary.BigEndian.PutUint32(rec[:], 1)
			if err := mem.Write(qdbr, rec[:]); err != nil {
				t.Fatal(err)
			}
			if err := d.ModifyQP(mlx5.ModifyQPCmd{QPN: r.QPN, Mask: mlx5.AttrState, State: mlx5.QPStateERR}); err != nil {
				t.Fatal(err)
			}
			d.eng.Run(100000)
			cqe := make([]byte, mlx5.CQE64Size)
			if err := mem.Read(d.cqs[cmd.RecvCQN].buf, cqe); err != nil {
				t.Fatal(err)
			}
			e := mlx5.CQE64(cqe)
			if e.Opcode() != mlx5.CQERespErr {
				t.Fatalf("CQE opcode %v, want a flushed receive", e.Opcode())
			}
			if got := e.SRQN(); got != c.want {
				t.Errorf("srqn_uidx %#x, want %#x", got, c.want)
			}
		})
	}
}
