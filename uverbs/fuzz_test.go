package uverbs

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecode feeds every struct's Decode (the first byte picks the struct):
// it must not panic, and what it accepts must re-encode to the same bytes,
// padding aside, and decode again to the same value.
func FuzzDecode(f *testing.F) {
	for i, l := range layouts {
		f.Add(append([]byte{byte(i)}, fill(l)...))
		f.Add(append([]byte{byte(i)}, make([]byte, l.Size-1)...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		i := int(in[0]) % len(registry)
		l, s := layouts[i], registry[i]()
		if err := s.Decode(in[1:]); err != nil {
			return
		}
		out := make([]byte, l.Size)
		if n, err := s.Encode(out); err != nil || n != l.Size {
			t.Fatalf("%s: Encode after Decode: %d, %v", l.C, n, err)
		}
		want := append([]byte(nil), in[1:1+l.Size]...)
		clearPads(l, want)
		if !bytes.Equal(out, want) {
			t.Fatalf("%s: re-encoded\n%x\nwant\n%x", l.C, out, want)
		}
		s2 := registry[i]()
		if err := s2.Decode(out); err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("%s: second Decode %v: %+v vs %+v", l.C, err, s, s2)
		}
	})
}

// clearPads zeroes the padding bytes of l (and of its nested structs),
// which Decode ignores and Encode writes as zero.
func clearPads(l Layout, b []byte) {
	for _, m := range l.Members {
		switch {
		case strings.HasPrefix(m.Kind, "pad"):
			clear(b[m.Offset : m.Offset+m.Width])
		case strings.HasPrefix(m.Kind, "st:"):
			for _, n := range layouts {
				if n.Go == m.Kind[3:] {
					clearPads(n, b[m.Offset:m.Offset+m.Width])
				}
			}
		}
	}
}

func goldenSeeds(f *testing.F) {
	for _, name := range []string{"get_context_mlx5", "create_cq_mlx5", "create_qp_rc_mlx5", "modify_qp_rtr", "ex_create_cq",
		"ioctl_mlx5_uar_alloc", "ioctl_invoke_write_alloc_pd", "req_notify_cq"} {
		if b, ok := goldenSeed[name]; ok {
			f.Add(b)
		}
	}
}

// goldenSeed holds a few golden commands for the fuzz seeds (filled from
// testdata by init so the fuzzers do not need testing.T).
var goldenSeed = map[string][]byte{}

// FuzzParseWrite: no panic; an accepted command's parts lie inside the
// input and add up to it.
func FuzzParseWrite(f *testing.F) {
	goldenSeeds(f)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := ParseWrite(in)
		if err != nil {
			return
		}
		hdr := CmdHdrSize
		if m.Extended {
			hdr += ExCmdHdrSize
		}
		if hdr+len(m.Core)+len(m.Driver) != len(in) {
			t.Fatalf("core %d + driver %d + headers %d != %d", len(m.Core), len(m.Driver), hdr, len(in))
		}
		if req, _, ok := CoreSizes(m.Cmd, m.Extended); ok && !m.Extended && len(m.Core) != req {
			t.Fatalf("%v: core %d bytes, want %d", m.Cmd, len(m.Core), req)
		}
	})
}

// FuzzParseIoctl: no panic; every attribute of an accepted request can be
// read, its ids are distinct and the length is the header's.
func FuzzParseIoctl(f *testing.F) {
	goldenSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := ParseIoctl(in)
		if err != nil {
			return
		}
		if len(h) != int(h.Length()) || len(h) > MaxIoctlLen {
			t.Fatalf("view %d bytes, length %d", len(h), h.Length())
		}
		seen := map[AttrID]bool{}
		for i := 0; i < h.NumAttrs(); i++ {
			a := h.Attr(i)
			if seen[a.ID()] {
				t.Fatalf("duplicate attr %#x accepted", a.ID())
			}
			seen[a.ID()] = true
			_, _ = a.Inline()
			if got, ok := h.FindAttr(a.ID()); !ok || !bytes.Equal(got, a) {
				t.Fatalf("FindAttr(%#x)", a.ID())
			}
		}
	})
}

// FuzzCheckTransition: no panic, and an accepted mask holds every required
// bit and nothing outside required|optional|STATE.
func FuzzCheckTransition(f *testing.F) {
	f.Add(uint8(QPTypeRC), uint8(QPStateInit), uint8(QPStateRTR), uint32(rtrMask))
	f.Add(uint8(QPTypeUD), uint8(QPStateSQE), uint8(QPStateRTS), uint32(QPAttrState|QPAttrQKey))
	f.Fuzz(func(t *testing.T, typ, cur, next uint8, mask uint32) {
		err := CheckTransition(QPType(typ), QPState(cur), QPState(next), QPAttrMask(mask))
		if err != nil {
			if _, ok := err.(*TransitionError); !ok {
				t.Fatalf("error %T", err)
			}
			return
		}
		tr, ok := LookupTransition(QPState(cur), QPState(next))
		if !ok {
			t.Fatal("accepted a pair that is not in the table")
		}
		req, opt := tr.Req.of(QPType(typ)), tr.Opt.of(QPType(typ))
		if QPAttrMask(mask)&req != req || QPAttrMask(mask)&^(req|opt|QPAttrState) != 0 {
			t.Fatalf("accepted %v for req %v opt %v", QPAttrMask(mask), req, opt)
		}
	})
}
