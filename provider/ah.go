package provider

import (
	"github.com/softnic/softnic/mlx5"
)

// AHAttr describes the destination of UD sends (struct ibv_ah_attr with
// is_global set, as RoCE requires).
type AHAttr struct {
	DGID [16]byte // destination GID: ::ffff:a.b.c.d for RoCEv2 over IPv4
	// DMAC is the destination MAC, resolved by the caller (for RoCE
	// libmlx5 has the kernel resolve it in CREATE_AH and copies the answer
	// into the address vector; softnic has no neighbour table in the
	// provider, so the caller resolves it, as for an RC QP's AV).
	DMAC         [6]byte
	Port         uint8 // port number, from 1
	SGIDIndex    uint8
	TrafficClass uint8 // IPv4 ToS
	HopLimit     uint8 // IPv4 TTL
	FlowLabel    uint32
}

// AH is an address handle (struct mlx5_ah): the 48-byte mlx5 address
// vector (struct mlx5_wqe_av) a UD send copies into its datagram segment.
// As in libmlx5 it lives in user space; creating or destroying one sends
// no command to the device.
type AH struct {
	pd   *PD
	attr AHAttr
	av   [mlx5.DatagramSegSize]byte
	dead bool
	kern *kernAH // a kernel device's AH (kernel_ud.go)
}

// Port numbers: softnic devices have one port.
const numPorts = 1

// udpSPortMin is IB_ROCE_UDP_ENCAP_VALID_PORT_MIN: RoCEv2 UDP source
// ports are 0xC000..0xFFFF.
const udpSPortMin = 0xc000

// flowLabelToUDPSPort is libibverbs' ibv_flow_label_to_udp_sport: the low
// 14 bits of the flow label folded with the high 6, in 0xC000..0xFFFF.
func flowLabelToUDPSPort(fl uint32) uint16 {
	lo, hi := fl&0x3fff, fl&0xfc000
	lo ^= hi >> 14
	return uint16(lo | udpSPortMin)
}

// CreateAH creates an address handle (ibv_create_ah), building its address
// vector the way mlx5_create_ah does for a RoCEv2 GID:
//
//   - rlid (@0x0E) is the UDP source port: ibv_flow_label_to_udp_sport of
//     the flow label when it is non-zero; otherwise libmlx5 picks a random
//     port in 0xC000..0xFFFF, which softnic replaces with a per-context
//     deterministic sequence (so runs repeat bit for bit);
//   - stat_rate_sl = 0 (no static rate, SL/priority 0), fl_mlid = 0;
//   - tclass, hop_limit, grh_gid_fl = sgid_index<<20 | flow label, with
//     bit 30 (GRH) clear as RoCE requires, rgid = DGID;
//   - rmac = DMAC.
//
// The key and dqp_dct fields are left 0: each send fills them.
//
// Errors (wrapped sentinels): ErrClosed for a destroyed PD or context;
// ErrInvalidArg for a port other than 1, a flow label wider than 20 bits,
// an all-zero DMAC (unresolved) or an unspecified DGID; ErrNotSupported
// for a DGID that is not IPv4-mapped (softnic speaks RoCEv2 over IPv4
// only). The SGID index is not checked here (libmlx5 asks the kernel for
// its GID type; softnic's AH has no command): the device checks it when a
// send uses the AH.
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	const op = "create_ah"
	if pd.gone() || pd.ctx.closed {
		return nil, opErr(op, 0, ErrClosed)
	}
	if pd.ctx.kern != nil {
		return pd.kernCreateAH(attr)
	}
	if err := checkAHAttr(&attr); err != nil {
		return nil, opErr(op, 0, err)
	}
	c := pd.ctx
	var sport uint16
	if attr.FlowLabel != 0 {
		sport = flowLabelToUDPSPort(attr.FlowLabel)
	} else {
		sport = c.nextUDPSPort()
	}
	ah := &AH{pd: pd, attr: attr}
	mlx5.DatagramSeg(ah.av[:]).Encode(&mlx5.DatagramFields{
		RLID: sport, RMAC: attr.DMAC, TClass: attr.TrafficClass, HopLimit: attr.HopLimit,
		GRHGIDFL: uint32(attr.SGIDIndex)<<20 | attr.FlowLabel, RGID: attr.DGID,
	})
	pd.refs++
	c.ahs[ah] = struct{}{}
	return ah, nil
}

// checkAHAttr validates the attributes CreateAH takes.
func checkAHAttr(a *AHAttr) error {
	var ipv4Mapped = [12]byte{10: 0xff, 11: 0xff}
	switch {
	case a.Port < 1 || a.Port > numPorts:
		return detail(ErrInvalidArg, "port %d (the device has %d)", a.Port, numPorts)
	case a.FlowLabel > 0xfffff:
		return detail(ErrInvalidArg, "flow label %#x wider than 20 bits", a.FlowLabel)
	case a.DMAC == [6]byte{}:
		return detail(ErrInvalidArg, "destination MAC not resolved (all zero)")
	case a.DGID == [16]byte{}:
		return detail(ErrInvalidArg, "destination GID unspecified")
	case [12]byte(a.DGID[:12]) != ipv4Mapped:
		return detail(ErrNotSupported, "destination GID %x is not IPv4-mapped (::ffff:a.b.c.d)", a.DGID)
	case [4]byte(a.DGID[12:]) == [4]byte{}:
		return detail(ErrInvalidArg, "destination IPv4 address 0.0.0.0")
	}
	return nil
}

// nextUDPSPort stands in for libmlx5's get_random() source port: a
// deterministic per-context sequence in 0xC000..0xFFFF.
func (c *Context) nextUDPSPort() uint16 {
	c.sportSeq++
	// splitmix32-style mixing of the sequence number, 14 bits kept.
	x := c.sportSeq * 0x9e3779b9
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	return uint16(x&0x3fff) | udpSPortMin
}

// Attr returns the attributes the AH was created with.
func (ah *AH) Attr() AHAttr {
	if ah == nil {
		return AHAttr{}
	}
	return ah.attr
}

// UDPSPort is the RoCEv2 UDP source port the AH's sends use.
func (ah *AH) UDPSPort() uint16 {
	if ah == nil {
		return 0
	}
	return mlx5.DatagramSeg(ah.av[:]).RLID()
}

// AV returns a copy of the 48-byte address vector (key and dqp_dct 0).
func (ah *AH) AV() []byte {
	if ah == nil || ah.pd == nil {
		return nil
	}
	out := make([]byte, len(ah.av))
	copy(out, ah.av[:])
	return out
}

// Destroy destroys the AH (ibv_destroy_ah). Sends already posted with it
// carry their own copy of the address vector and are not affected.
func (ah *AH) Destroy() error {
	if ah.gone() {
		return opErr("destroy_ah", 0, ErrClosed)
	}
	if ah.kern != nil {
		if err := ah.pd.ctx.kern.rxe.destroyAH(ah.kern.handle); err != nil {
			return opErr("destroy_ah", 0, err)
		}
	}
	ah.dead = true
	ah.pd.refs--
	delete(ah.pd.ctx.ahs, ah)
	return nil
}
