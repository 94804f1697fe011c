package uverbs_test

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/softnic/softnic/uverbs"
)

// A provider encodes CREATE_CQ with its mlx5 driver data into a buffer of
// its own, exactly as it would write() it to /dev/infiniband/uverbsN; the
// other side (the kernel, or softnic's daemon) parses and decodes it.
func Example() {
	buf := make([]byte, 128)
	req := uverbs.CreateCQ{Response: 0x7f0000002200, UserHandle: 1, CQE: 255, CompChannel: uverbs.NoCompChannel}
	drv := uverbs.MLX5CreateCQ{BufAddr: 0x7f0000100000, DBAddr: 0x7f0000200000, CQESize: 64}
	n, err := uverbs.PutWriteHdr(buf, uverbs.CmdCreateCQ, req.Size()+drv.Size(), uverbs.CreateCQRespSize+uverbs.MLX5CreateCQRespSize)
	if err != nil {
		panic(err)
	}
	k, _ := req.Encode(buf[uverbs.CmdHdrSize:])
	_, _ = drv.Encode(buf[uverbs.CmdHdrSize+k:])
	fmt.Printf("write(fd, buf, %d): % x\n", n, buf[:uverbs.CmdHdrSize])

	m, err := uverbs.ParseWrite(buf[:n])
	if err != nil {
		panic(err)
	}
	var core uverbs.CreateCQ
	var mlx uverbs.MLX5CreateCQ
	if err := core.Decode(m.Core); err != nil {
		panic(err)
	}
	if err := mlx.Decode(m.Driver); err != nil {
		panic(err)
	}
	fmt.Printf("%v: cqe %d, comp_channel %d, response at %#x (%d bytes)\n", m.Cmd, core.CQE, core.CompChannel, m.Response, m.OutLen)
	fmt.Printf("mlx5: buf %#x, doorbell record %#x, %d-byte CQEs\n", mlx.BufAddr, mlx.DBAddr, mlx.CQESize)

	// Output:
	// write(fd, buf, 72): 12 00 00 00 12 00 04 00
	// CREATE_CQ: cqe 255, comp_channel -1, response at 0x7f0000002200 (16 bytes)
	// mlx5: buf 0x7f0000100000, doorbell record 0x7f0000200000, 64-byte CQEs
}

// CheckTransition is the kernel's ib_modify_qp_is_ok: an RC QP needs six
// attributes to reach RTR, and the error says which are missing.
func ExampleCheckTransition() {
	mask := uverbs.QPAttrState | uverbs.QPAttrAV | uverbs.QPAttrPathMTU | uverbs.QPAttrDestQPN | uverbs.QPAttrRQPSN
	err := uverbs.CheckTransition(uverbs.QPTypeRC, uverbs.QPStateInit, uverbs.QPStateRTR, mask)
	fmt.Println(err)
	fmt.Println(errors.Is(err, uverbs.ErrMissingAttr), errors.Is(err, syscall.EINVAL))
	fmt.Println(uverbs.CheckTransition(uverbs.QPTypeUC, uverbs.QPStateInit, uverbs.QPStateRTR, mask))
	// Output:
	// uverbs: MODIFY_QP RC INIT->RTR: required QP attribute missing: needs MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC
	// true true
	// <nil>
}
