#include "textflag.h"

// Stores into a mapped UAR page (write-combining for BlueFlame pages):
// plain MOVs the compiler cannot merge, reorder or elide, and SFENCE to
// drain the write-combining buffers (rdma-core util/udma_barrier.h
// mmio_flush_writes / mmio_wc_start on x86_64).

// func store64(addr unsafe.Pointer, v uint64)
TEXT ·store64(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET

// func store32(addr unsafe.Pointer, v uint32)
TEXT ·store32(SB), NOSPLIT, $0-12
	MOVQ addr+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET

// func sfence()
TEXT ·sfence(SB), NOSPLIT, $0-0
	SFENCE
	RET

// func copy64(dst, src unsafe.Pointer): one 64-byte BlueFlame chunk as eight
// 8-byte stores in ascending order (libmlx5 mlx5_bf_copy).
TEXT ·copy64(SB), NOSPLIT, $0-16
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ 0(SI), AX
	MOVQ AX, 0(DI)
	MOVQ 8(SI), AX
	MOVQ AX, 8(DI)
	MOVQ 16(SI), AX
	MOVQ AX, 16(DI)
	MOVQ 24(SI), AX
	MOVQ AX, 24(DI)
	MOVQ 32(SI), AX
	MOVQ AX, 32(DI)
	MOVQ 40(SI), AX
	MOVQ AX, 40(DI)
	MOVQ 48(SI), AX
	MOVQ AX, 48(DI)
	MOVQ 56(SI), AX
	MOVQ AX, 56(DI)
	RET
