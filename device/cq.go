package device

import (
	"encoding/binary"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/sim"
)

// cq is the device side of a completion queue.
type cq struct {
	cqn      uint32
	buf, dbr uint64
	nent     uint32
	pi       uint32 // producer index
	ci       uint32 // last consumer index read from the doorbell record
	armed    bool
	armSN    uint8
	overrun  bool
}

// writeCQE DMA-writes one CQE at the CQ's producer index. The whole entry
// lands in host memory when the posted write completes (dma.WriteVisible),
// op_own included, so the provider never sees a CQE before the device
// could have written it (mlx5.md §6.6).
func (d *Device) writeCQE(t sim.Time, c *cq, f *mlx5.CQEFields, flow uint64) sim.Time {
	if c.overrun {
		d.warn(t, "cqe_dropped_overrun", "CQ %d is in overrun; CQE for QP %#x dropped", c.cqn, f.QPN)
		return t
	}
	if c.pi-c.ci >= c.nent {
		// Looks full: refresh the consumer index from the doorbell record.
		var b [4]byte
		done, _, err := d.dma.Read(t, c.dbr, b[:])
		if err == nil {
			c.ci = binary.BigEndian.Uint32(b[:]) & 0xffffff
			// set_ci is 24 bits; rebuild the full counter near pi.
			c.ci = c.pi - (c.pi-c.ci)&0xffffff
		}
		t = done
		if c.pi-c.ci >= c.nent {
			c.overrun = true
			d.warn(t, "cq_overrun", "CQ %d overrun: producer %d, consumer %d, %d entries", c.cqn, c.pi, c.ci, c.nent)
			return t
		}
	}
	t = t.Add(d.cyc(d.spec.Core.CQECycles))
	f.Owner = mlx5.CQEOwnerBit(c.pi, c.nent)
	f.Timestamp = uint64(t / 1000) // HCA clock in ns
	addr := c.buf + uint64(c.pi&(c.nent-1))*mlx5.CQE64Size
	cqe := mlx5.CQE64(d.scratch[:])
	cqe.Encode(f)
	done, st, err := d.dma.WriteVisible(t, addr, cqe)
	if err != nil {
		d.warn(t, "cqe_write_error", "CQ %d CQE write at %#x: %v", c.cqn, addr, err)
		return t
	}
	c.pi++
	d.ctr.Inc("cqes")
	d.rec.Stage(d.node, "device", "cqe_write", t, done, mlx5.CQE64Size, st.TLPs(), f.QPN, flow)
	return done
}
