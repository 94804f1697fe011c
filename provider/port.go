package provider

import (
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/uverbs"
)

// PortState is enum ibv_port_state. Its values are uverbs.PortState's
// (the ABI's one table); the type is the provider's own for its String.
type PortState uint8

// Port states (ibv_port_state).
const (
	PortNop    = PortState(uverbs.PortNop)
	PortDown   = PortState(uverbs.PortDown)
	PortInit   = PortState(uverbs.PortInit)
	PortArmed  = PortState(uverbs.PortArmed)
	PortActive = PortState(uverbs.PortActive)
)

// String is the ibv_port_state name (PORT_ACTIVE, ...).
func (s PortState) String() string {
	switch s {
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	}
	return "PORT_NOP"
}

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	Index int
	GID   [16]byte
	Type  string // "RoCE v2"
}

// PortAttr is what QueryPort reports (ibv_port_attr's fields for a RoCE
// port).
type PortAttr struct {
	State      PortState
	PhysState  uint8 // 3 DISABLED, 5 LINK_UP
	MaxMTU     int   // bytes
	ActiveMTU  int   // bytes
	MaxMsgSize uint64
	LinkLayer  string // "Ethernet"
	GIDs       []GIDEntry
}

// QueryPort asks the device for the state of port (1) and its GID table.
func (c *Context) QueryPort(port int) (PortAttr, error) {
	const op = "query_port"
	if c.gone() {
		return PortAttr{}, opErr(op, 0, ErrClosed)
	}
	pc, ok := c.ctl.(mlx5.PortControl)
	if !ok {
		return PortAttr{}, opErr(op, 0, detail(ErrNotSupported, "device %q does not answer QUERY_PORT", c.name))
	}
	a, err := pc.QueryPort(port)
	if err != nil {
		return PortAttr{}, opErr(op, 0, err)
	}
	p := PortAttr{State: PortState(a.State), PhysState: a.PhysState, MaxMTU: a.MaxMTU.Bytes(), ActiveMTU: a.ActiveMTU.Bytes(),
		MaxMsgSize: a.MaxMsgSize, LinkLayer: "Ethernet"}
	for i, g := range a.GIDs {
		p.GIDs = append(p.GIDs, GIDEntry{Index: i, GID: g, Type: "RoCE v2"})
	}
	return p, nil
}
