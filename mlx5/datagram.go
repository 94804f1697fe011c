package mlx5

import "encoding/binary"

// DatagramSegSize is the size of the datagram segment (address vector) that
// follows the control segment in UD and DCI send WQEs.
const DatagramSegSize = 48

// ExtendedAVFlag is dqp_dct bit 31 (MLX5_EXTENDED_UD_AV): the address vector
// is the full 48-byte form; libmlx5 always sets it.
const ExtendedAVFlag = 0x80000000

// DatagramSeg is the datagram segment (struct mlx5_wqe_datagram_seg, which is
// struct mlx5_wqe_av; mlx5.md §4.5):
//
//	0x00 key          UD: Q_Key BE32 + reserved dword; DC: 64-bit access key
//	0x08 dqp_dct      bit31 extended AV, [23:0] destination QPN / DCT
//	0x0C stat_rate_sl [7:4] static rate; IB [3:0] SL; RoCE [3:1] priority
//	0x0D fl_mlid      bit7 force loopback, [6:0] source path bits
//	0x0E rlid         IB remote LID, RoCEv2 UDP source port
//	0x14 rmac         RoCE destination MAC
//	0x1A tclass       0x1B hop_limit
//	0x1C grh_gid_fl   bit30 GRH (IB only), [27:20] SGID index, [19:0] flow label
//	0x20 rgid         remote GID / IP
type DatagramSeg []byte

// DatagramFields are the fields of a datagram segment.
type DatagramFields struct {
	Key        uint64 // UD: Q_Key<<32 (the reserved low dword is 0); DC: access key
	DestQPN    uint32 // [23:0]
	ExtendedAV bool
	StatRateSL uint8
	FLMLID     uint8
	RLID       uint16 // RoCEv2: UDP source port
	RMAC       [6]byte
	TClass     uint8
	HopLimit   uint8
	GRHGIDFL   uint32
	RGID       [16]byte
}

// Key is the whole 64-bit key field.
func (d DatagramSeg) Key() uint64 { return binary.BigEndian.Uint64(d[0:8]) }

// QKey is the UD Q_Key (the first dword of the key).
func (d DatagramSeg) QKey() uint32 { return binary.BigEndian.Uint32(d[0:4]) }

// DestQPN is the destination QPN (or DCT number).
func (d DatagramSeg) DestQPN() uint32 { return binary.BigEndian.Uint32(d[8:12]) & 0xffffff }

// ExtendedAV reports the extended-AV flag.
func (d DatagramSeg) ExtendedAV() bool { return binary.BigEndian.Uint32(d[8:12])&ExtendedAVFlag != 0 }

// StatRateSL is the static-rate / SL (priority) byte.
func (d DatagramSeg) StatRateSL() uint8 { return d[12] }

// FLMLID is the force-loopback / source-path-bits byte.
func (d DatagramSeg) FLMLID() uint8 { return d[13] }

// RLID is the remote LID (IB) or the RoCEv2 UDP source port.
func (d DatagramSeg) RLID() uint16 { return binary.BigEndian.Uint16(d[14:16]) }

// RMAC is the destination MAC address.
func (d DatagramSeg) RMAC() (m [6]byte) { copy(m[:], d[20:26]); return m }

// TClass is the traffic class (IPv4 ToS).
func (d DatagramSeg) TClass() uint8 { return d[26] }

// HopLimit is the hop limit (IPv4 TTL).
func (d DatagramSeg) HopLimit() uint8 { return d[27] }

// GRHGIDFL is the grh_gid_fl dword.
func (d DatagramSeg) GRHGIDFL() uint32 { return binary.BigEndian.Uint32(d[28:32]) }

// SGIDIndex is grh_gid_fl[27:20].
func (d DatagramSeg) SGIDIndex() uint8 { return uint8(d.GRHGIDFL() >> 20) }

// FlowLabel is grh_gid_fl[19:0].
func (d DatagramSeg) FlowLabel() uint32 { return d.GRHGIDFL() & 0xfffff }

// RGID is the remote GID (::ffff:a.b.c.d for IPv4).
func (d DatagramSeg) RGID() (g [16]byte) { copy(g[:], d[32:48]); return g }

// Fields decodes the segment.
func (d DatagramSeg) Fields() DatagramFields {
	return DatagramFields{Key: d.Key(), DestQPN: d.DestQPN(), ExtendedAV: d.ExtendedAV(), StatRateSL: d.StatRateSL(),
		FLMLID: d.FLMLID(), RLID: d.RLID(), RMAC: d.RMAC(), TClass: d.TClass(), HopLimit: d.HopLimit(),
		GRHGIDFL: d.GRHGIDFL(), RGID: d.RGID()}
}

// Encode writes all 48 bytes of d (reserved bytes zeroed), as
// mlx5dv_set_dgram_seg does.
func (d DatagramSeg) Encode(f *DatagramFields) {
	_ = d[DatagramSegSize-1]
	binary.BigEndian.PutUint64(d[0:8], f.Key)
	w := f.DestQPN & 0xffffff
	if f.ExtendedAV {
		w |= ExtendedAVFlag
	}
	binary.BigEndian.PutUint32(d[8:12], w)
	d[12], d[13] = f.StatRateSL, f.FLMLID
	binary.BigEndian.PutUint16(d[14:16], f.RLID)
	clear(d[16:20])
	copy(d[20:26], f.RMAC[:])
	d[26], d[27] = f.TClass, f.HopLimit
	binary.BigEndian.PutUint32(d[28:32], f.GRHGIDFL)
	copy(d[32:48], f.RGID[:])
}
