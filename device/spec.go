package device

import (
	"encoding/json"
	"fmt"
	"math/bits"

	"github.com/softnic/softnic/bar"
	"github.com/softnic/softnic/dma"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/sim"
)

// Spec is an immutable device profile: every latency and capacity the model
// uses, as data. Numbers cite ../shared/reference/timing.md where one exists;
// the rest are marked as assumptions.
type Spec struct {
	Name string     `json:"name"`
	PCIe pcie.Spec  `json:"pcie"`
	BAR  bar.Config `json:"bar"`
	DMA  dma.Config `json:"dma"`
	Core CoreSpec   `json:"core"`
	Caps Caps       `json:"caps"`

	Transport TransportSpec `json:"transport"`
	Events    EventSpec     `json:"events"`
	Faults    FaultSpec     `json:"faults"`
}

// TransportSpec holds the transport rules on which a ConnectX and Linux
// rxe differ, as switches.
type TransportSpec struct {
	// RetryCnt7Infinite makes retry_cnt 7 retry for ever, as rxe does
	// (rocev2.md §4.4). The IB spec and a ConnectX count 7 as seven
	// retries; only rnr_retry 7 is infinite there. Default false.
	RetryCnt7Infinite bool `json:"retry_cnt_7_infinite"`
}

// CoreSpec is the NIC's processing pipeline: a core clock and cycle costs
// per stage. No public source gives ConnectX per-stage costs (timing.md §5.2
// "not in any public source"); the defaults are assumptions chosen so that
// the default profile's end-to-end small-WRITE latency lands in the
// published 0.8-1.0 µs half-RTT band (timing.md §4.1, §7 check 7).
type CoreSpec struct {
	Clock           sim.Freq `json:"clock_hz"`
	DoorbellCycles  int64    `json:"doorbell_cycles"`  // decode a doorbell / BF write, schedule the SQ
	WQEParseCycles  int64    `json:"wqe_parse_cycles"` // validate and decode one WQE
	PacketizeCycles int64    `json:"packetize_cycles"` // build one packet's headers and ICRC
	RxCycles        int64    `json:"rx_cycles"`        // parse and check one received packet
	ResponderCycles int64    `json:"responder_cycles"` // responder work per request packet
	AckCycles       int64    `json:"ack_cycles"`       // build an ACK / NAK
	CQECycles       int64    `json:"cqe_cycles"`       // build one CQE

	// TxPipeline and RxPipeline are the latency of the port's transmit
	// path (after a packet is built, until its first bit is on the wire)
	// and of its receive path (last bit in, until the packet reaches its
	// QP's processing). Latency only: they do not occupy the packetizer or
	// the receive stage, so they cost no message rate. No public source
	// gives them (timing.md §5.2); assumed 250 ns each so that the
	// perftest 2 B RC half round trip lands in the published 0.8-1.0 µs
	// band (timing.md §4.1, §7 check 7; softnic calibrate). Without them
	// the model's half round trip was 0.38 µs.
	TxPipeline sim.Duration `json:"tx_pipeline_ps"`
	RxPipeline sim.Duration `json:"rx_pipeline_ps"`

	// TxBufferBytes bounds the port's transmit buffer: frames built and
	// not yet serialized onto the wire. While it holds more than this, the
	// packetizer builds nothing more (requests and READ responses; ACKs
	// still go) and the waiting QPs take turns, in order, as it drains
	// (txbuf.go). A ConnectX's buffer size is not public: 64 KiB, 5 µs
	// at 100 Gb/s (the profiles keep 5 µs at 200 and 400 Gb/s), is an
	// assumption, large enough that half of it outlasts a DMA read (about
	// 1 µs, timing.md §2.1), so one QP still fills the port; small enough
	// that QPs sharing the port each see their ACKs within a few µs. 0:
	// unbounded, the frames of every QP queue at the port in build order
	// (what softnic did before: a QP's whole window went ahead of every
	// other QP's, whose retransmit timers then expired with no loss).
	TxBufferBytes int `json:"tx_buffer_bytes"`

	// Receive-WQE read-ahead (see rqPrefetch; unconfirmed mechanism).
	RQPrefetch     bool         `json:"rq_prefetch"`         // read the next posted receive WQE ahead
	RQPolls        int          `json:"rq_polls"`            // doorbell-record re-reads while none is posted
	RQPollInterval sim.Duration `json:"rq_poll_interval_ps"` // between those re-reads
}

// Caps are the device limits reported by QUERY_DEVICE.
type Caps struct {
	// Identity as QUERY_DEVICE reports it (ibv_devinfo's vendor_id,
	// vendor_part_id and hw_ver).
	VendorID     uint32 `json:"vendor_id"`
	VendorPartID uint32 `json:"vendor_part_id"`
	HWVer        uint32 `json:"hw_ver"`

	MaxQP   int `json:"max_qp"`
	MaxQPWR int `json:"max_qp_wr"`
	MaxSGE  int `json:"max_sge"`
	MaxCQ   int `json:"max_cq"`
	// MaxCQE is max_cqe as QUERY_DEVICE reports it: the most entries a
	// CQ may be created with. As on a ConnectX (max_cqe = 2^log_max_cq_sz
	// - 1) the ring holds one more, a power of two: the device takes rings
	// up to CQRing.
	MaxCQE     int    `json:"max_cqe"`
	MaxMR      int    `json:"max_mr"`
	MaxPD      int    `json:"max_pd"`
	MaxInline  int    `json:"max_inline"`
	MaxMsgSize uint64 `json:"max_msg_size"`
	MaxRdAtom  int    `json:"max_qp_rd_atom"`
	ActiveMTU  int    `json:"active_mtu"`
	FirstQPN   uint32 `json:"first_qpn"`
	// BFReg0NoBlueFlame answers CREATE_QP for bfreg index 0 with no
	// BlueFlame buffer, as libmlx5 treats uuarn 0 (faults.md R11). Default
	// false: softnic's first QP uses BlueFlame on it, as it always has.
	BFReg0NoBlueFlame bool `json:"bfreg0_no_blueflame,omitempty"`
}

// DefaultSpec is the built-in profile: a ConnectX-5-class 100 GbE NIC on a
// PCIe Gen3 x16 link.
func DefaultSpec() Spec {
	bc := bar.DefaultConfig()
	return Spec{
		Name: "cx5-gen3x16",
		PCIe: pcie.Gen3x16(),
		BAR:  bc,
		// 256 read tags: 8-bit PCIe Extended Tags, which Linux enables by
		// default where the device supports them (since 4.13); that a CX-5
		// uses all 256 is unconfirmed. 32 (5-bit tags) would leave 16 KiB of
		// reads in flight and make MTU 4096 slower than MTU 1024.
		DMA: dma.Config{MaxReadTags: 256},
		Core: CoreSpec{
			Clock:           1 * sim.GHz, // assumption
			DoorbellCycles:  20,
			WQEParseCycles:  30,
			PacketizeCycles: 40,
			RxCycles:        40,
			ResponderCycles: 30,
			AckCycles:       20,
			CQECycles:       20,
			TxPipeline:      250 * sim.Nanosecond,
			RxPipeline:      250 * sim.Nanosecond,
			TxBufferBytes:   64 << 10,
			RQPrefetch:      true,
			RQPolls:         8,
			RQPollInterval:  500 * sim.Nanosecond,
		},
		Events: DefaultEventSpec(),
		Faults: FaultSpec{HealthPoll: DefaultHealthPoll},
		Caps: Caps{
			VendorID: 0x02c9, VendorPartID: 4119, HWVer: 0, // Mellanox, ConnectX-5 (ibv_devinfo on a CX-5)
			MaxQP: 1 << 16, MaxQPWR: 1 << 15, MaxSGE: 30, MaxCQ: 1 << 16, MaxCQE: 1<<22 - 1,
			MaxMR: 1 << 16, MaxPD: 1 << 16, MaxInline: 512, MaxMsgSize: 1 << 31, MaxRdAtom: 16,
			ActiveMTU: 4096, FirstQPN: 0x100,
		},
	}
}

// ParseSpec decodes a JSON profile over the defaults (fields not given keep
// their default values).
func ParseSpec(b []byte) (Spec, error) {
	s := DefaultSpec()
	if err := json.Unmarshal(b, &s); err != nil {
		return Spec{}, fmt.Errorf("device: profile: %w", err)
	}
	return s, nil
}

// MaxCapSGE and MaxCapInline are the most scatter entries and inline
// bytes a send WQE of every QP type holds: max_sq_desc_sz (16 WQEBBs,
// 1024 B) less a UD WQE's control and datagram segments (64 B), and the
// inline header. A larger max_sge or max_inline would be reported and
// refused to every QP that asked it.
const (
	MaxCapSGE    = (mlx5.MaxWQEBBs*mlx5.WQEBBSize - mlx5.CtrlSegSize - mlx5.DatagramSegSize) / mlx5.DataSegSize
	MaxCapInline = mlx5.MaxWQEBBs*mlx5.WQEBBSize - mlx5.CtrlSegSize - mlx5.DatagramSegSize - mlx5.InlineHdrSize
)

// CQRing is the largest CQ ring the device takes: roundup_pow2(MaxCQE+1),
// the ring libmlx5 and mlx5_ib make for a CQ of MaxCQE entries.
func (c Caps) CQRing() int { return 1 << bits.Len(uint(max(c.MaxCQE, 0))) }

func (c CoreSpec) cycles(n int64) sim.Duration { return c.Clock.Cycles(n) }
