package mlx5

// PortAttr answers QUERY_PORT (the fields ibv_query_port reports that a
// RoCE port has).
type PortAttr struct {
	State      uint8 // enum ibv_port_state: 1 DOWN, 4 ACTIVE
	PhysState  uint8 // 3 DISABLED, 5 LINK_UP
	MaxMTU     MTU
	ActiveMTU  MTU
	MaxMsgSize uint64
	GIDs       [][16]byte // the GID table; every entry is RoCE v2
}

// PortControl is implemented by devices that answer QUERY_PORT.
type PortControl interface {
	QueryPort(port int) (PortAttr, error)
}
