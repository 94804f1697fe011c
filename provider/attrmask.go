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

// ValidMTU reports whether n bytes is an IB path MTU (256, 512, 1024,
// 2048 or 4096), what ConnectAttr.MTU takes.
func ValidMTU(n int) bool { return mlx5.MTUFromBytes(n) != 0 }
