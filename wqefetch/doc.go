// Package wqefetch is the per-send-queue WQE fetch engine: on a doorbell it
// DMA-reads the new WQEBBs from the host SQ ring (wrap included, as few reads
// as possible), on a complete BlueFlame write it takes the WQE from the BF
// buffer and skips the fetch, then validates each control segment and moves
// every WQE through explicit lifecycle states. Spec: mlx5.md §4.1-4.9 and
// DESIGN.md §2 step 5.
//
// Ordering: DMA completions are not monotonic in issue order (a short read
// issued after a long one can finish first), so each queue keeps its
// fetches in flight, in issue order, as WQEBB ranges. A fetch that completes
// early waits; WQEs reach the Sink strictly in ring order, each exactly
// once, as soon as every earlier fetch has arrived. A BlueFlame write is
// only taken when no fetch is pending, so it cannot overtake them.
//
// Generations: Queue.Reset (QP to RESET) and Queue.Close (QP destroyed)
// start a new generation; a fetch of an older one is dropped and counted
// wqe_fetch_stale (CtrFetchStale), never delivered.
//
// Decoding covers NOP, SEND, SEND_IMM, RDMA_WRITE(_IMM), RDMA_READ and the
// RC atomics ATOMIC_CS / ATOMIC_FA (ctrl, raddr, atomic, one data segment).
package wqefetch
