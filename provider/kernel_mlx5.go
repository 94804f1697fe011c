package provider

import (
	"github.com/softnic/softnic/internal/kverbs"
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
)

// The mlx5 kernel backend: the same provider as on the emulated NIC —
// Open with UverbsControl as the control (libmlx5's GET_CONTEXT driver
// data asking for dynamic UARs, MLX5_IB_METHOD_UAR_OBJ_ALLOC, CREATE_CQ
// and CREATE_QP with buffers and doorbell records in the context's
// memory), and as the MMIO port the UAR page mapped from the uverbs fd,
// written through kverbs' assembly stores and SFENCE. The WQE build,
// doorbell record, doorbell/BlueFlame and CQ polling are post.go's and
// cq.go's, unchanged. Untested without a ConnectX: docs/hardware.md is
// the manual plan.

// mlx5Kernel is the control of a kernel mlx5 device: UverbsControl over
// the uverbs fd, which maps the context's UAR once GET_CONTEXT has
// allocated it.
type mlx5Kernel struct {
	*UverbsControl
	dev   *kverbs.Dev
	mem   *shm.Region
	mmio  *lateUAR
	async *kverbs.EventFD // GET_CONTEXT's async-event fd
}

// lateUAR is the MMIO port of a kernel mlx5 context: the UAR, mapped when
// GET_CONTEXT returns (Open asks for the context after it has the port).
// Stores before that are dropped.
type lateUAR struct {
	*kverbs.UAR
}

func (l *lateUAR) Store64(off, v uint64) {
	if l.UAR != nil {
		l.UAR.Store64(off, v)
	}
}

func (l *lateUAR) Store32(off uint64, v uint32) {
	if l.UAR != nil {
		l.UAR.Store32(off, v)
	}
}

// Covers is false until the UAR is mapped.
func (l *lateUAR) Covers(off uint64, n int) bool { return l.UAR != nil && l.UAR.Covers(off, n) }

func (l *lateUAR) Flush() {
	if l.UAR != nil {
		l.UAR.Flush()
	}
}

func (l *lateUAR) StoreLines(off uint64, a, b []byte) {
	if l.UAR != nil {
		l.UAR.StoreLines(off, a, b)
	}
}

// GetContext is UverbsControl's, then the mmap of the UAR it allocated.
func (m *mlx5Kernel) GetContext() (mlx5.ContextResp, error) {
	r, err := m.UverbsControl.GetContext()
	if err != nil {
		return r, err
	}
	if m.asyncFD >= 0 {
		// Owned from here, so that Close closes it when Open fails later
		// (the UAR mmap, QUERY_DEVICE, the attribute checks).
		m.async = kverbs.NewEventFD(int(m.asyncFD))
	}
	if m.uarMmapLength == 0 || m.uarMmapLength > 1<<20 {
		return r, detail(ErrNotSupported, "mlx5 UAR of %d bytes", m.uarMmapLength)
	}
	u, err := m.dev.MapUAR(m.uarMmapOffset, int(m.uarMmapLength), uint64(r.UARIndex)*mlx5.UARPageSize)
	if err != nil {
		return r, detail(ErrNoMemory, "%v", err)
	}
	m.mmio.UAR = u
	return r, nil
}

// Close unmaps the UAR, closes the uverbs fd (the kernel destroys what
// is left) and unmaps the context's memory.
func (m *mlx5Kernel) Close() error {
	if m.async != nil {
		_ = m.async.Close()
		m.async = nil
	}
	if m.mmio.UAR != nil {
		_ = m.mmio.Unmap()
		m.mmio.UAR = nil
	}
	err := m.dev.Close()
	_ = m.mem.Close()
	return err
}

func openMLX5(d kverbs.Device, o KernelOptions) (*Context, error) {
	const op = "open"
	dev, err := kverbs.Open(d)
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	if o.MemSize <= 0 {
		o.MemSize = 32 << 20
	}
	mem, err := shm.New("softnic-"+d.Name, o.MemSize, 0)
	if err != nil {
		_ = dev.Close()
		return nil, opErr(op, 0, detail(ErrNoMemory, "%v", err))
	}
	m := &mlx5Kernel{UverbsControl: NewUverbsControl(dev), dev: dev, mem: mem, mmio: &lateUAR{}}
	m.dynUAR = true
	m.events = true // user handles on CQs, QPs and SRQs; the async fd
	ctx, err := Open(Device{Name: d.Name, Control: m, MMIO: m.mmio, Mem: mem})
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	// Events as the kernel delivers them: completion channels are its fds
	// (named in CREATE_CQ), CQs are armed in user space through the UAR
	// (ReqNotify, as on the emulated NIC), asynchronous events come on the
	// async fd; records name objects by user_handle (kernel_events.go).
	ctx.kev = newKernEvents(m.createCompChannel, m.async)
	return ctx, nil
}
