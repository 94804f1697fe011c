package provider

import "github.com/softnic/softnic/mlx5"

// QP attribute masks for QP.Modify: enum ibv_qp_attr_mask, bit for bit,
// so that an application needs no mlx5 import to modify a QP.
const (
	AttrState           = mlx5.AttrState
	AttrCurState        = mlx5.AttrCurState
	AttrAccessFlags     = mlx5.AttrAccessFlags
	AttrPKeyIndex       = mlx5.AttrPKeyIndex
	AttrPort            = mlx5.AttrPort
	AttrQKey            = mlx5.AttrQKey
	AttrAV              = mlx5.AttrAV
	AttrPathMTU         = mlx5.AttrPathMTU
	AttrTimeout         = mlx5.AttrTimeout
	AttrRetryCnt        = mlx5.AttrRetryCnt
	AttrRNRRetry        = mlx5.AttrRNRRetry
	AttrRQPSN           = mlx5.AttrRQPSN
	AttrMaxQPRdAtomic   = mlx5.AttrMaxQPRdAtomic
	AttrAltPath         = mlx5.AttrAltPath
	AttrMinRNRTimer     = mlx5.AttrMinRNRTimer
	AttrSQPSN           = mlx5.AttrSQPSN
	AttrMaxDestRdAtomic = mlx5.AttrMaxDestRdAtomic
	AttrPathMigState    = mlx5.AttrPathMigState
	AttrCap             = mlx5.AttrCap
	AttrDestQPN         = mlx5.AttrDestQPN
)

// MTU is an IB path MTU as enum ibv_mtu numbers it (IBV_MTU_256 = 1 ..
// IBV_MTU_4096 = 5), what QPAttr.PathMTU holds; Bytes converts it.
type MTU = mlx5.MTU

// Path MTUs (enum ibv_mtu).
const (
	MTU256  = mlx5.MTU256
	MTU512  = mlx5.MTU512
	MTU1024 = mlx5.MTU1024
	MTU2048 = mlx5.MTU2048
	MTU4096 = mlx5.MTU4096
)

// MTUFromBytes maps 256, 512, 1024, 2048 or 4096 bytes to its enum, and
// anything else to 0.
func MTUFromBytes(n int) MTU { return mlx5.MTUFromBytes(n) }

// DeviceAttr is what QUERY_DEVICE reports (struct ibv_device_attr's
// fields the datapath uses, the port's active MTU, MAC and RoCEv2 GID,
// and the BlueFlame geometry of GET_CONTEXT); Context.Attr returns it.
type DeviceAttr = mlx5.DeviceAttr

// ValidMTU reports whether n bytes is an IB path MTU (256, 512, 1024,
// 2048 or 4096), what ConnectAttr.MTU takes.
func ValidMTU(n int) bool { return mlx5.MTUFromBytes(n) != 0 }
