package uverbs

// Struct is implemented by every uverbs struct (zz_layouts.go).
type Struct interface {
	Size() int
	Encode(b []byte) (int, error)
	Decode(b []byte) error
}

// Layout is one struct of layouts.txt: its Go and C names, its size and
// its members, for the layout test and for documentation.
type Layout struct {
	Go, C   string
	Size    int
	Members []Member
}

// Member is one member of a Layout. Go is empty for reserved and padding
// bytes, which have no Go field. Kind is the layouts.txt kind (u32, be64,
// b16, st:QPDest, rsv4, pad4, ...).
type Member struct {
	Go, C         string
	Offset, Width int
	Kind          string
}

// Layouts returns every struct the package encodes, in layouts.txt order.
// The slice is shared: do not modify it.
func Layouts() []Layout { return layouts }

// IsZero reports whether every byte of b is zero: reserved fields and
// padding, and the bytes of a request beyond the struct its command takes
// (uverbs_request, ib_is_udata_cleared).
func IsZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
