//go:build !cgo

package uverbslayout

// Member is one row of the C side of the layout table.
type Member struct {
	Struct, Member string
	Offset, Width  int
}

// CLayouts is empty without cgo.
func CLayouts() []Member { return nil }

// CValues is empty without cgo.
func CValues() map[string]uint64 { return nil }

// Missing says why the C side is empty: this build has no cgo.
func Missing() (layouts, values string) {
	const why = "built without cgo (no C compiler, or CGO_ENABLED=0)"
	return why, why
}
