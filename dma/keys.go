package dma

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/shm"
)

// Errors of key checks and transfers (test with errors.Is).
var (
	ErrBadKey     = errors.New("dma: no memory region with this key")
	ErrPDMismatch = errors.New("dma: memory region belongs to another protection domain")
	ErrBounds     = errors.New("dma: access outside the memory region")
	ErrAccess     = errors.New("dma: memory region lacks the access right")
	ErrLength     = errors.New("dma: data does not fit the scatter/gather list")
	ErrBadMR      = errors.New("dma: invalid memory region")
	ErrKeyExists  = errors.New("dma: key already registered")
	// ErrInvalidated: the key was invalidated (a SEND with invalidate); it
	// stays registered until deregistered but grants no access.
	ErrInvalidated = errors.New("dma: memory key invalidated")
	// ErrNotInvalidatable: a remote invalidate named a key that may not be
	// invalidated remotely (an ordinary registered MR).
	ErrNotInvalidatable = errors.New("dma: memory key may not be invalidated remotely")
)

// Access is the right an operation needs on a memory region, and says
// whether the address is local (the MR's Addr is byte 0) or remote (its
// HCAVA is byte 0).
type Access uint8

// Rights an operation can need.
const (
	LocalRead    Access = iota // gather for a send / RDMA-write payload; always granted
	LocalWrite                 // scatter of a receive or an RDMA-read / atomic response
	RemoteRead                 // inbound RDMA READ
	RemoteWrite                // inbound RDMA WRITE
	RemoteAtomic               // inbound atomic
)

var accessNames = [...]string{"local read", "local write", "remote read", "remote write", "remote atomic"}

func (a Access) String() string {
	if int(a) < len(accessNames) {
		return accessNames[a]
	}
	return fmt.Sprintf("access(%d)", uint8(a))
}

// Remote reports whether the address is a remote peer's (HCAVA-based) one.
func (a Access) Remote() bool { return a >= RemoteRead }

// bit is the mlx5.Access* flag the right needs; 0 for local read.
func (a Access) bit() uint32 {
	switch a {
	case LocalWrite:
		return mlx5.AccessLocalWrite
	case RemoteRead:
		return mlx5.AccessRemoteRead
	case RemoteWrite:
		return mlx5.AccessRemoteWrite
	case RemoteAtomic:
		return mlx5.AccessRemoteAtomic
	}
	return 0
}

// MR is one registered memory region (an mkey in PA/MTT mode that maps a
// contiguous IOVA range; mlx5.md §8).
type MR struct {
	Key    uint32 // lkey == rkey (mlx5: mkey index << 8 | variant)
	PDN    uint32
	Addr   uint64 // host IOVA of byte 0
	Length uint64
	HCAVA  uint64 // the VA remote peers use for byte 0; usually == Addr
	Access uint32 // mlx5.Access* bits; local read is always allowed

	// RemoteInvalidate allows a peer's SEND with invalidate to invalidate
	// the key (mkc en_rinval, mlx5.md §8; in rxe only fast-reg MRs,
	// IB_MR_TYPE_MEM_REG, and type 2 MWs). Nothing in this model sets it:
	// REG_MR makes ordinary user MRs, which rxe refuses to invalidate, and
	// there is no fast-reg MR or memory window yet.
	RemoteInvalidate bool

	invalid bool // invalidated: every check fails until the key is removed
}

// KeyError is a failed key check: which key, where, how long, which right,
// and why (Err, one of the sentinels).
type KeyError struct {
	Key  uint32
	VA   uint64
	Len  uint64
	Need Access
	Err  error
}

func (e *KeyError) Error() string {
	kind := "lkey"
	if e.Need.Remote() {
		kind = "rkey"
	}
	return fmt.Sprintf("dma: %s %#x [%#x, +%d) %s: %v", kind, e.Key, e.VA, e.Len, e.Need, e.Err)
}

// Unwrap returns the sentinel.
func (e *KeyError) Unwrap() error { return e.Err }

// LengthError is a receive that does not fit its scatter list (or a gather
// whose SGEs exceed the destination).
type LengthError struct {
	Need, Have uint64
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("dma: %d bytes do not fit %d bytes of buffers: %v", e.Need, e.Have, ErrLength)
}

// Unwrap returns ErrLength.
func (e *LengthError) Unwrap() error { return ErrLength }

// Syndrome maps an error from this package to the error-CQE syndrome the
// device reports (mlx5.md §6.4):
//
//   - local key failures (bad key, wrong PD, out of bounds, missing right on
//     the device's own SGEs) → LOCAL_PROT (0x04). The IBA defines "local
//     protection error" as a locally posted WR whose buffers are not valid
//     for the operation; LOCAL_ACCESS (0x11) is reserved for a responder's
//     protection error on an inbound RDMA WRITE with immediate, so it is not
//     used for the requester's own lkey checks (libmlx5 maps both 1:1 to
//     ibv_wc_status, so the choice is visible to applications);
//   - remote key failures (an rkey check at the responder) → the responder
//     NAKs with "remote access error" and the requester's CQE carries
//     REMOTE_ACCESS (0x13); the responder side itself completes nothing;
//   - ErrLength → LOCAL_LENGTH (0x01);
//   - host memory outside the shm region (an IOMMU-style fault; assumed, no
//     source says which syndrome ConnectX reports) → LOCAL_PROT.
//
// It returns 0 for a nil error.
func Syndrome(err error) mlx5.Syndrome {
	var ke *KeyError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ke) && ke.Need.Remote():
		return mlx5.SyndRemoteAccess
	case errors.Is(err, ErrLength):
		return mlx5.SyndLocalLength
	case errors.Is(err, shm.ErrOutOfRange):
		return mlx5.SyndLocalProt
	default:
		return mlx5.SyndLocalProt
	}
}

// IsRemote reports whether err is a failed remote (rkey) check, which the
// responder answers with a NAK (remote access error) rather than a CQE.
func IsRemote(err error) bool {
	var ke *KeyError
	return errors.As(err, &ke) && ke.Need.Remote()
}

// Keys is the device's table of memory regions by key. Not safe for
// concurrent use; Check does not allocate on success.
type Keys struct {
	m     map[uint32]*MR
	cache [8]keyEnt // recently checked keys, direct-mapped: a hit skips the map
}

type keyEnt struct {
	key uint32
	mr  *MR // nil: empty
}

// find is k.m[key] through the cache. Only Remove takes keys out of m,
// and it empties the cache, so an entry is always m's.
func (k *Keys) find(key uint32) *MR {
	c := &k.cache[(key^key>>8^key>>16)&7]
	if c.mr != nil && c.key == key {
		return c.mr
	}
	mr := k.m[key]
	if mr != nil {
		*c = keyEnt{key: key, mr: mr}
	}
	return mr
}

// NewKeys returns an empty table.
func NewKeys() *Keys { return &Keys{m: make(map[uint32]*MR)} }

// Add registers mr. It refuses a duplicate key, the list-terminator key
// (mlx5.InvalidKey), a range that wraps the address space, and remote write
// or atomic rights without local write (the IBA rule the kernel enforces at
// ibv_reg_mr).
func (k *Keys) Add(mr MR) error {
	const remoteWriteLike = mlx5.AccessRemoteWrite | mlx5.AccessRemoteAtomic
	switch {
	case mr.Key == mlx5.InvalidKey:
		return fmt.Errorf("%w: key %#x is the list terminator", ErrBadMR, mr.Key)
	case wraps(mr.Addr, mr.Length) || wraps(mr.HCAVA, mr.Length):
		return fmt.Errorf("%w: key %#x range [%#x, +%d) wraps", ErrBadMR, mr.Key, mr.Addr, mr.Length)
	case mr.Access&remoteWriteLike != 0 && mr.Access&mlx5.AccessLocalWrite == 0:
		return fmt.Errorf("%w: key %#x has remote write/atomic without local write", ErrBadMR, mr.Key)
	}
	if _, dup := k.m[mr.Key]; dup {
		return fmt.Errorf("%w: %#x", ErrKeyExists, mr.Key)
	}
	c := mr
	k.m[mr.Key] = &c
	return nil
}

// wraps reports whether the last byte of [a, a+n) lies past 2^64-1 (a
// region may end exactly at the top of the address space).
func wraps(a, n uint64) bool { return n != 0 && a+(n-1) < a }

// Remove deregisters key.
func (k *Keys) Remove(key uint32) error {
	if _, ok := k.m[key]; !ok {
		return &KeyError{Key: key, Err: ErrBadKey}
	}
	delete(k.m, key)
	k.cache = [8]keyEnt{}
	return nil
}

// Lookup returns the region registered under key.
func (k *Keys) Lookup(key uint32) (*MR, bool) {
	mr, ok := k.m[key]
	return mr, ok
}

// Invalidate is a remote invalidate of key (the IETH of a SEND with
// invalidate arriving on a QP of protection domain pdn, rocev2.md §4.6):
// it fails with ErrBadKey for a key no MR has (or one already
// invalidated), ErrNotInvalidatable for a key registered without
// RemoteInvalidate, and ErrPDMismatch for another PD's key. On success
// every later Check of the key fails with ErrInvalidated until Remove.
//
// Assumption (unconfirmed): the PD check. rxe_invalidate_mr checks that
// the MR exists, its key matches, it has no bound MWs and is a fast-reg
// MR, but not its PD; the IBA ties an rkey's use to the QP's PD, and
// this model applies that to invalidation too. No MR here can pass the
// RemoteInvalidate test anyway.
func (k *Keys) Invalidate(key, pdn uint32) error {
	mr := k.m[key]
	switch {
	case mr == nil || mr.invalid:
		return fmt.Errorf("dma: invalidate rkey %#x: %w", key, ErrBadKey)
	case !mr.RemoteInvalidate:
		return fmt.Errorf("dma: invalidate rkey %#x: %w", key, ErrNotInvalidatable)
	case mr.PDN != pdn:
		return fmt.Errorf("dma: invalidate rkey %#x: %w", key, ErrPDMismatch)
	}
	mr.invalid = true
	return nil
}

// Len is the number of registered regions.
func (k *Keys) Len() int { return len(k.m) }

// Check validates an access of n bytes at va through key from protection
// domain pdn needing right need, and returns the host IOVA of va. Local
// accesses address the region by Addr, remote ones by HCAVA. The bounds
// test is overflow-safe: [va, va+n) must lie in [base, base+Length) without
// computing va+n.
//
// A zero-length access checks nothing and returns 0: the IBA does not
// validate the R_Key of a zero-length RDMA operation, and libmlx5 never
// emits a zero-length data segment (it skips them), so a device that sees
// one has nothing to transfer.
func (k *Keys) Check(key, pdn uint32, va, n uint64, need Access) (hostAddr uint64, err error) {
	if n == 0 {
		return 0, nil
	}
	mr := k.find(key)
	if mr == nil {
		return 0, &KeyError{Key: key, VA: va, Len: n, Need: need, Err: ErrBadKey}
	}
	if mr.invalid {
		return 0, &KeyError{Key: key, VA: va, Len: n, Need: need, Err: ErrInvalidated}
	}
	if mr.PDN != pdn {
		return 0, &KeyError{Key: key, VA: va, Len: n, Need: need, Err: ErrPDMismatch}
	}
	base := mr.Addr
	if need.Remote() {
		base = mr.HCAVA
	}
	if va < base || va-base > mr.Length || n > mr.Length-(va-base) {
		return 0, &KeyError{Key: key, VA: va, Len: n, Need: need, Err: ErrBounds}
	}
	if b := need.bit(); mr.Access&b != b {
		return 0, &KeyError{Key: key, VA: va, Len: n, Need: need, Err: ErrAccess}
	}
	return mr.Addr + (va - base), nil
}
