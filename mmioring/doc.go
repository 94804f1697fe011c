// Package mmioring carries a client's MMIO writes to the device daemon: a
// single-producer/single-consumer ring of 64-byte slots in shared memory.
//
// The region is caller-supplied (a memfd mapping in production, an
// anonymous shared mapping in tests), 64-byte aligned, and holds no Go
// pointers, only indices and data words (timing.md §9.4-9.5). The client's
// host side is the Producer; the daemon's device side is the Consumer. The
// consumer trusts nothing the producer wrote: every index, sequence word,
// width, flag and offset is bounds-checked, so a hostile or dead producer
// yields errors (ErrBadRing, ErrBadRecord, ErrTimeout), never a panic,
// an out-of-ring access or an endless loop. The producer checks the
// consumer index the same way.
//
// # Layout
//
// All words little-endian. The header is four 128-byte lines (128: the
// adjacent-line prefetcher pairs 64-byte lines, as rxe assumes), so each
// side writes on its own line only in the fast path.
//
//	offset  size  meaning
//	     0     4  magic 0x524d4e53 ("SNMR"); stored last, atomically, by Init
//	     4     4  version (1)
//	     8     4  slot count N, a power of two, 2..1<<20
//	    12     4  slot size (64)
//	    16     4  header size = offset of slot 0 (512)
//	    20     4  features (0; anything else is refused)
//	    24     8  ring size in bytes = 512 + 64*N
//	    32     4  closed: bit 0 producer closed, bit 1 consumer closed (atomic)
//	    36    92  reserved, zero
//	   128     4  producer index: free-running u32 count of slots published (atomic)
//	   132     4  consumer sleeping: 1 while the consumer sleeps or is about to;
//	              the consumer's futex word (atomic)
//	   136   120  reserved (rest of the producer's 128-byte line)
//	   256     4  consumer index: free-running u32 count of slots released (atomic)
//	   260     4  producer waiting (ring full): 1 while the producer sleeps or is
//	              about to; the producer's futex word (atomic)
//	   264   120  reserved (rest of the consumer's line)
//	   384     4  reply sequence: ring position of the call answered + 1 (atomic;
//	              the consumer writes the reply line)
//	   388     4  producer awaiting a reply: 1 while the producer sleeps (atomic;
//	              the producer's futex word for replies)
//	   392     8  reply time (ps)
//	   400     8  reply value
//	   408     4  reply status (0, or an errno)
//	   412   100  reserved
//	   512  64*N  slots; ring position p lives in slot p & (N-1)
//
// Each flag word sits on the line of the side that must check it on every
// call (the producer checks "consumer sleeping" after each publish, the
// consumer checks "producer waiting" after each release), so the check is a
// load of a line that side already owns; the flag is written only on the
// slow path.
//
// A record takes one slot, or two for a 64-byte line. The header slot:
//
//	offset  size  meaning
//	     0     4  sequence: the slot's ring position p (the consumer checks it
//	              equals its own index, so a producer index that ran ahead of the
//	              payload, or a stale slot from the previous lap, is caught)
//	     4     1  width: 4, 8, 64 (a write-combined line), or 0 (a flush alone)
//	     5     1  flags: bit 0 FlagFlush (a WC flush / sfence followed this write);
//	              bit 1 FlagCall (a call, alone, on a width-0 record); other
//	              bits must be zero
//	     6     2  reserved, zero
//	     8     8  BAR0 offset, a multiple of the width (0 for a flush; a call's
//	              argument)
//	    16     8  host virtual time of the write, ps
//	    24     8  byte enables of a line (bit i: byte i written; non-zero), else 0
//	    32     8  data of a 4- or 8-byte write (a 4-byte write in the low half);
//	              a call's operation word
//	    40     4  QPN label: the QP of the doorbell or BlueFlame post the host
//	              tracked the write in (trace and fault labels only)
//	    44     4  reserved, zero
//	    48     8  flow label of that post (trace.Event.Flow)
//	    56     8  reserved, zero
//
// A 64-byte line's data is the whole of the next slot (position p+1, which
// wraps to slot 0 after slot N-1). Both slots are published by one store of
// the producer index, so the consumer sees the whole line or none of it, in
// ring order with every other write.
//
// Why indices and not Vyukov-style per-slot sequence publication: a
// batch (PushN, PopN) then costs one atomic store per side however many
// records it holds, each side polls one word rather than the next slot,
// and an untrusted peer has only two words to lie with, both checked
// against the ring size. The sequence word in each header slot is kept
// for checking, not for publication: it catches a producer index that
// claims slots the producer never wrote.
//
// # Memory ordering
//
// The rules of timing.md §9.5, with Go's sync/atomic (sequentially
// consistent; amd64 Store is XCHG, Load is MOV; arm64 STLR/LDAR):
//
//  1. The producer writes a record's slots with plain stores, then
//     publishes any number of them with one atomic store of the producer
//     index (PushN: one per batch). The consumer atomic-loads the index,
//     then reads the slots with plain loads. Release/acquire on the index
//     orders the payload; a second process mapping the same pages sees
//     the same hardware ordering (formally outside the Go memory model,
//     as for C11 across processes).
//  2. In reverse, the consumer reads the payload, then releases slots with
//     one atomic store of the consumer index; the producer atomic-loads it
//     before overwriting them.
//  3. Indices are free-running u32s, N a power of two dividing 2^32:
//     used = prod - cons, full when used + need > N. Each side keeps its
//     own index privately (never re-read from shared memory) and caches
//     the peer's, re-reading it only when the ring looks empty or full.
//     A peer index that moves backwards or more than N ahead is ErrBadRing.
//  4. The consumer reads every shared word of a slot once into a local
//     before checking it, and all accesses go through bounds-checked
//     slices, so a producer rewriting a slot under the consumer can at
//     worst deliver a wrong (but valid-looking) record or an error.
//  5. Wake-ups (Dekker with sequentially consistent atomics): a waiter
//     stores 1 to its flag word, re-checks the peer index, and only then
//     FUTEX_WAITs on the flag word with value 1 and a timeout. The peer
//     stores its index, then loads the flag; if set, it swaps it to 0 and
//     FUTEX_WAKEs. One of the two always sees the other's store, and a
//     swap before the sleep makes FUTEX_WAIT return at once, so no wake-up
//     is lost. Close sets its closed bit, zeroes both flag words and wakes
//     both, so a sleeping peer fails with ErrClosed at once.
//
// # Calls
//
// The producer sometimes needs an answer: the device's clock after it ran
// up to the host's time, the next event, the value of a register read. A
// call is a width-0 record with FlagCall alone, published in ring order
// behind every write before it; Producer.Call then waits for the reply
// line (spin, yield, futex on its awaiting-a-reply flag, deadline). The
// consumer answers with Consumer.Reply, which publishes the reply by one
// atomic store of the call's position + 1. One call is outstanding at a
// time, so one reply line is enough. The ring does not define operations:
// the daemon does (package serve).
//
// # Waiting
//
// No locks and no system calls while the ring is neither empty nor full: a
// publish is one atomic store and one load of the producer's own line. A
// blocked Push or Pop polls the peer index Spin times, then Yield times
// after runtime.Gosched, then sleeps on a shared futex (FUTEX_WAIT, not
// FUTEX_PRIVATE, since two processes map the word) until the deadline.
// Futexes rather than an eventfd: the wait word is the flag in the ring
// itself, so the ring needs nothing but the mapping to cross a process
// boundary, and a wake-up costs a syscall only when the peer really
// sleeps. Every wait takes a deadline (the zero Time: do not wait, ErrFull
// or ErrEmpty); a peer that died without closing costs at most that
// deadline (ErrTimeout), never a hang.
//
// # A BlueFlame write on the ring
//
// The provider copies a WQE of up to bf_buf_size bytes to the UAR's
// BlueFlame buffer with 8-byte write-combined stores and then flushes
// (mmio_flush_writes). The host side's write-combining buffer merges the
// stores into lines and emits each line as one Width-64 record with
// Mask = FullMask; the line emitted by the flush carries FlagFlush. A
// 128-byte WQE at BF offset 0x800 of UAR page 1 (BAR0 0x1800) at host time
// t is two records, four slots, usually published by one PushN:
//
//	pos p:   seq p,   width 64, flags 0, off 0x1800, time t, mask ^0  (header)
//	pos p+1: the 64 bytes of WQE bytes 0..63                          (data)
//	pos p+2: seq p+2, width 64, flags 1, off 0x1840, time t, mask ^0  (header)
//	pos p+3: the 64 bytes of WQE bytes 64..127                        (data)
//
// A line evicted before the flush (a torn BlueFlame) is a Width-64 record
// with only the written bytes in Mask and no FlagFlush; a flush with no
// line pending is a Width-0 record with FlagFlush. A plain doorbell is one
// Width-8 record (UAR + 0x800), a CQ arm a Width-8 or Width-4 record.
package mmioring
