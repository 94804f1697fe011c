package mlx5

import "encoding/binary"

// DBRec is an 8-byte doorbell record in host memory (mlx5.md §3).
// QP: [0] receive counter, [1] send counter (WQEBBs). CQ: [0] set_ci, [1] arm.
type DBRec []byte

// Doorbell-record word indexes.
const (
	DBRRecv  = 0 // QP: RQ WQEs posted, mod 2^16
	DBRSend  = 1 // QP: SQ WQEBB producer counter, mod 2^16
	DBRSetCI = 0 // CQ: consumer index & 0xffffff
	DBRArm   = 1 // CQ: sn<<28 | cmd | ci
)

// Word returns dword i (0 or 1).
func (d DBRec) Word(i int) uint32 { return binary.BigEndian.Uint32(d[4*i:]) }

// SetWord stores dword i.
func (d DBRec) SetWord(i int, v uint32) { binary.BigEndian.PutUint32(d[4*i:], v) }

// CQArm is the 64-bit CQ arm doorbell value (mlx5.md §6.7) as the two
// big-endian dwords written to UAR+0x20.
type CQArm struct {
	SN            uint8
	SolicitedOnly bool
	CI            uint32
	CQN           uint32
}

// CQArmCmdSolicited is the arm command for solicited-only notification.
const CQArmCmdSolicited = 1 << 24

// ArmWord is BE32 dword 0 of the arm doorbell.
func (a CQArm) ArmWord() uint32 {
	v := uint32(a.SN&3)<<28 | a.CI&0xffffff
	if a.SolicitedOnly {
		v |= CQArmCmdSolicited
	}
	return v
}

// ParseCQArm decodes the 8 doorbell bytes.
func ParseCQArm(b []byte) CQArm {
	w := binary.BigEndian.Uint32(b[0:4])
	return CQArm{SN: uint8(w >> 28 & 3), SolicitedOnly: w&CQArmCmdSolicited != 0, CI: w & 0xffffff,
		CQN: binary.BigEndian.Uint32(b[4:8]) & 0xffffff}
}
