package mlx5

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// eqeBytes builds a 64-byte EQE from (offset, bytes) pairs over zeroes,
// so each golden byte of the table below sits at the offset mlx5.md §6.8
// gives it.
func eqeBytes(at ...any) []byte {
	b := make([]byte, EQESize)
	for i := 0; i < len(at); i += 2 {
		copy(b[at[i].(int):], hx(at[i+1].(string)))
	}
	return b
}

// TestEQEGolden: the EQE layout of mlx5.md §6.8 (type @0x01, sub_type
// @0x03, data @0x20, signature @0x3E, owner @0x3F; completion cqn = data
// dword 6 @0x38; QP/SRQ events: type @data+0x14, number @data+0x18) and,
// for CQ errors and port changes, struct mlx5_eqe_cq_err / mlx5_eqe_port_state
// of the kernel's device.h (cqn @0x20, syndrome @0x2B; port @0x28 [7:4]).
func TestEQEGolden(t *testing.T) {
	cases := []struct {
		name string
		f    EQEFields
		want []byte
	}{
		{"completion, CQ 0x123456, owner 1", EQEFields{Type: EQEComp, CQN: 0x123456, Owner: true},
			eqeBytes(0x01, "00", 0x38, "00123456", 0x3f, "01")},
		{"completion, cqn masked to 24 bits", EQEFields{Type: EQEComp, CQN: 0xff000007},
			eqeBytes(0x38, "00000007")},
		{"WQ_CATAS_ERROR on QP 0x1a2b3c", EQEFields{Type: EQEWQCatasError, QueueType: EventQueueQP, Num: 0x1a2b3c},
			eqeBytes(0x01, "05", 0x34, "00", 0x38, "001a2b3c")},
		{"WQ_ACCESS_ERROR on an SQ", EQEFields{Type: EQEWQAccessError, QueueType: EventQueueSQ, Num: 0x101},
			eqeBytes(0x01, "11", 0x34, "02", 0x38, "00000101")},
		{"COMM_EST, signature", EQEFields{Type: EQECommEst, Num: 0x42, Signature: 0x5a, Owner: true},
			eqeBytes(0x01, "02", 0x38, "00000042", 0x3e, "5a", 0x3f, "01")},
		{"SRQ_RQ_LIMIT on SRQ 9", EQEFields{Type: EQESRQRQLimit, Num: 9},
			eqeBytes(0x01, "14", 0x38, "00000009")},
		{"SRQ_LAST_WQE on QP 0x100", EQEFields{Type: EQESRQLastWQE, Num: 0x100},
			eqeBytes(0x01, "13", 0x38, "00000100")},
		{"CQ_ERROR overrun on CQ 0xabcdef", EQEFields{Type: EQECQError, CQN: 0xabcdef, Syndrome: CQErrOverrun},
			eqeBytes(0x01, "04", 0x20, "00abcdef", 0x2b, "01")},
		{"PORT_CHANGE active, port 1", EQEFields{Type: EQEPortChange, SubType: PortChangeActive, Port: 1},
			eqeBytes(0x01, "09", 0x03, "04", 0x28, "10")},
		{"PORT_CHANGE down, port 2", EQEFields{Type: EQEPortChange, SubType: PortChangeDown, Port: 2, Owner: true},
			eqeBytes(0x01, "09", 0x03, "01", 0x28, "20", 0x3f, "01")},
		{"INTERNAL_ERROR carries no data", EQEFields{Type: EQEInternalError, CQN: 5, Num: 6},
			eqeBytes(0x01, "08")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bytes.Repeat([]byte{0xa5}, EQESize)
			EQE(b).Encode(&c.f)
			require.Equal(t, c.want, b, "Encode overwrites all 64 bytes")
			back := EQE(b).Fields()
			exp := c.f
			switch exp.Type.Kind() { // what the type does not carry reads back as zero
			case EQEKindComp:
				exp.CQN &= 0xffffff
				exp.Num, exp.QueueType, exp.Syndrome, exp.Port = 0, 0, 0, 0
			case EQEKindNone:
				exp.CQN, exp.Num = 0, 0
			}
			require.Equal(t, exp, back)
		})
	}
}

// TestEQEOwnership: the owner rule of mlx5.md §6.6 for EQs (owner init
// value 1): a fresh ring is hardware-owned on the first lap; the device
// writes owner = (pi / nent) & 1.
func TestEQEOwnership(t *testing.T) {
	const nent = 8
	e := EQE(make([]byte, EQESize))
	e[EQEOffOwner] = EQEOwnerInit
	require.False(t, EQEOwnedBySW(e, 0, nent), "initialised entry, first lap")
	for _, pi := range []uint32{0, 3, 7, 8, 9, 15, 16, 1<<24 + 5} {
		f := EQEFields{Type: EQEComp, CQN: 1, Owner: EQEOwnerBit(pi, nent)}
		e.Encode(&f)
		require.True(t, EQEOwnedBySW(e, pi, nent), "written at %d, read at %d", pi, pi)
		require.False(t, EQEOwnedBySW(e, pi+nent, nent), "one lap later the same bytes are stale")
	}
}

func TestEQDoorbell(t *testing.T) {
	v := EQDoorbell(3, 0x1234567)
	require.Equal(t, uint32(0x03234567), v)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	eqn, ci := ParseEQDoorbell(b[:])
	require.Equal(t, uint8(3), eqn)
	require.Equal(t, uint32(0x234567), ci)
}

// TestEventEQEMapping: every verbs event with an EQE maps back to itself,
// with the EQE types of faults.md §1.3.
func TestEventEQEMapping(t *testing.T) {
	want := map[EventType][2]uint8{
		EventCQErr: {0x04, 0}, EventQPFatal: {0x05, 0}, EventQPReqErr: {0x10, 0}, EventQPAccessErr: {0x11, 0},
		EventCommEst: {0x02, 0}, EventSQDrained: {0x03, 0}, EventPathMig: {0x01, 0}, EventPathMigErr: {0x07, 0},
		EventDeviceFatal: {0x08, 0}, EventPortActive: {0x09, 4}, EventPortErr: {0x09, 1}, EventLIDChange: {0x09, 6},
		EventPKeyChange: {0x09, 7}, EventSRQErr: {0x12, 0}, EventSRQLimitReached: {0x14, 0}, EventQPLastWQEReached: {0x13, 0},
		// handle_port_change: sub-type 8 (GUID) is GID_CHANGE, 9 CLIENT_REREGISTER.
		EventGIDChange: {0x09, 8}, EventClientReregister: {0x09, 9},
	}
	for ev, w := range want {
		t.Run(ev.String(), func(t *testing.T) {
			typ, sub, ok := EQEForEvent(ev)
			require.True(t, ok)
			require.Equal(t, w, [2]uint8{uint8(typ), sub})
			back, ok := EventForEQE(typ, sub)
			require.True(t, ok)
			require.Equal(t, ev, back)
		})
	}
	_, _, ok := EQEForEvent(EventSMChange)
	require.False(t, ok, "SM_CHANGE has no mlx5 EQE")
	// ibv_event_type 17..20 (faults.md §1.3) have their verbs names.
	for ev, name := range map[EventType]string{EventClientReregister: "CLIENT_REREGISTER", EventGIDChange: "GID_CHANGE", EventWQFatal: "WQ_FATAL", EventDeviceSpeedChange: "DEVICE_SPEED_CHANGE"} {
		require.Equal(t, name, ev.String())
	}
	for _, nt := range []EQEType{EQEComp, EQECmd, EQEPageRequest, EQEPageFault, 0x7f} {
		_, ok := EventForEQE(nt, 0)
		require.False(t, ok, "%v is not a verbs event", nt)
	}
	ev, ok := EventForEQE(EQEPortChange, PortChangeInitialized)
	require.True(t, ok)
	require.Equal(t, EventPortErr, ev, "INITIALIZED is reported as PORT_ERR")
	_, ok = EventForEQE(EQEPortChange, 0x0f)
	require.False(t, ok, "unknown port sub-type")
}

// FuzzEQE: any 64 bytes decode without panicking; Encode(Fields(b))
// reproduces b on every bit the type's layout carries and zeroes the rest;
// decoding again gives the same Fields.
func FuzzEQE(f *testing.F) {
	f.Add(make([]byte, EQESize))
	f.Add(bytes.Repeat([]byte{0xff}, EQESize))
	f.Fuzz(func(t *testing.T, in []byte) {
		b := sized(in, EQESize)
		e := EQE(b)
		fl := e.Fields()
		if fl.Type != EQEType(b[1]) || fl.SubType != b[3] || fl.Owner != (b[0x3f]&1 == 1) || fl.Signature != b[0x3e] {
			t.Fatalf("header fields %+v disagree with %x", fl, b)
		}
		canon := make([]byte, EQESize)
		canon[1], canon[3], canon[0x3e], canon[0x3f] = b[1], b[3], b[0x3e], b[0x3f]&1
		switch fl.Type.Kind() {
		case EQEKindComp:
			if fl.CQN != binary.BigEndian.Uint32(b[0x38:])&0xffffff {
				t.Fatalf("cqn %#x from %x", fl.CQN, b)
			}
			copy(canon[0x39:0x3c], b[0x39:0x3c])
		case EQEKindQPSRQ:
			if fl.Num != binary.BigEndian.Uint32(b[0x38:])&0xffffff || fl.QueueType != b[0x34] {
				t.Fatalf("qp/srq %+v from %x", fl, b)
			}
			canon[0x34] = b[0x34]
			copy(canon[0x39:0x3c], b[0x39:0x3c])
		case EQEKindCQErr:
			if fl.CQN != binary.BigEndian.Uint32(b[0x20:])&0xffffff || fl.Syndrome != b[0x2b] {
				t.Fatalf("cq error %+v from %x", fl, b)
			}
			copy(canon[0x21:0x24], b[0x21:0x24])
			canon[0x2b] = b[0x2b]
		case EQEKindPort:
			if fl.Port != b[0x28]>>4 {
				t.Fatalf("port %d from %x", fl.Port, b)
			}
			canon[0x28] = b[0x28] & 0xf0
		}
		_ = EQEOwnedBySW(e, binary.BigEndian.Uint32(b[0x20:]), 1<<(b[0x24]&31))
		if ev, ok := EventForEQE(fl.Type, fl.SubType); ok {
			if typ, _, ok := EQEForEvent(ev); !ok || typ != fl.Type {
				t.Fatalf("%v/%d → %v → %v, %v", fl.Type, fl.SubType, ev, typ, ok)
			}
		}
		out := EQE(bytes.Repeat([]byte{0xa5}, EQESize))
		out.Encode(&fl)
		if !bytes.Equal(out, canon) {
			t.Fatalf("Encode(Fields(%x)) = %x, want %x", b, []byte(out), canon)
		}
		if out.Fields() != fl {
			t.Fatalf("decode after encode: %+v, want %+v", out.Fields(), fl)
		}
	})
}
