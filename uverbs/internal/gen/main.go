// Command gen turns uverbs/layouts.txt (every uverbs struct: its C name,
// size and the offset, width and kind of each member) into the Go structs
// with their Encode/Decode methods (uverbs/zz_layouts.go) and into the C
// table that test/uverbslayout compares against the uapi headers
// (test/uverbslayout/zz_ctable.h). Run it with `go generate ./uverbs`.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

type member struct {
	off    int
	kind   string // u8 u16 u32 u64 s32 be32 be64 bN rsvN padN st:Name
	cname  string
	goname string
	gotype string // named type override, or the nested struct's Go name
	width  int
}

type layout struct {
	goname, cname, doc string
	size               int
	members            []member
}

var initialisms = map[string]string{
	"qp": "QP", "cq": "CQ", "pd": "PD", "mr": "MR", "srq": "SRQ", "ah": "AH", "id": "ID", "psn": "PSN",
	"mtu": "MTU", "qpn": "QPN", "gid": "GID", "dgid": "DGID", "sgid": "SGID", "lid": "LID", "dlid": "DLID",
	"slid": "SLID", "sm": "SM", "sl": "SL", "sge": "SGE", "wr": "WR", "db": "DB", "uar": "UAR", "cqe": "CQE",
	"qkey": "QKey", "pkey": "PKey", "lkey": "LKey", "rkey": "RKey", "vl": "VL", "fd": "FD", "ca": "CA",
	"va": "VA", "hca": "HCA", "guid": "GUID", "fw": "FW", "hw": "HW", "rd": "Rd", "ee": "EE", "ipv6": "IPv6",
	"mw": "MW", "rdd": "RDD", "rnr": "RNR", "sq": "SQ", "rq": "RQ", "wqe": "WQE", "wqebb": "WQEBB",
	"uidx": "UIdx", "bfreg": "BFReg", "bfregs": "BFRegs", "bf": "BF", "tirn": "TIRN", "tisn": "TISN",
	"tir": "TIR", "rqn": "RQN", "sqn": "SQN", "cqn": "CQN", "srqn": "SRQN", "pdn": "PDN", "icm": "ICM",
	"ece": "ECE", "dci": "DCI", "uhw": "UHW", "dmac": "DMAC", "mi": "MI", "tbl": "Tbl", "dctn": "DCTN",
	"lmc": "LMC", "ethy": "Ethy", "mcast": "Mcast", "sz": "Sz", "cntr": "Cntr", "viol": "Viol",
}

func camel(s string) string {
	var b strings.Builder
	for _, p := range strings.Split(s, "_") {
		if p == "" {
			continue
		}
		if v, ok := initialisms[p]; ok {
			b.WriteString(v)
			continue
		}
		b.WriteString(strings.ToUpper(p[:1]) + p[1:])
	}
	return b.String()
}

func widthOf(kind string, byName map[string]*layout) (int, error) {
	switch kind {
	case "u8":
		return 1, nil
	case "u16":
		return 2, nil
	case "u32", "s32", "be32":
		return 4, nil
	case "u64", "be64", "s64":
		return 8, nil
	}
	for _, p := range []string{"rsv", "pad", "b"} {
		if strings.HasPrefix(kind, p) {
			if n, err := strconv.Atoi(kind[len(p):]); err == nil {
				return n, nil
			}
		}
	}
	if strings.HasPrefix(kind, "st:") {
		l := byName[kind[3:]]
		if l == nil {
			return 0, fmt.Errorf("unknown nested struct %s (define it first)", kind[3:])
		}
		return l.size, nil
	}
	return 0, fmt.Errorf("unknown kind %q", kind)
}

func parse(path string) ([]*layout, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*layout
	byName := map[string]*layout{}
	var cur *layout
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if fs[0] == "struct" {
			if len(fs) < 4 {
				return nil, fmt.Errorf("%s:%d: struct GoName c_name size doc", path, ln)
			}
			n, err := strconv.Atoi(fs[3])
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, ln, err)
			}
			cur = &layout{goname: fs[1], cname: fs[2], size: n, doc: strings.Join(fs[4:], " ")}
			out = append(out, cur)
			byName[cur.goname] = cur
			continue
		}
		if cur == nil || len(fs) < 3 {
			return nil, fmt.Errorf("%s:%d: member outside a struct or too short", path, ln)
		}
		off, err := strconv.Atoi(fs[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, ln, err)
		}
		m := member{off: off, kind: fs[1], cname: fs[2]}
		if m.width, err = widthOf(m.kind, byName); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, ln, err)
		}
		cn := m.cname[strings.LastIndex(m.cname, ".")+1:]
		m.goname = camel(cn)
		if len(fs) > 3 && fs[3] != "-" {
			m.goname = fs[3]
		}
		if len(fs) > 4 {
			m.gotype = fs[4]
		}
		if strings.HasPrefix(m.kind, "st:") {
			m.gotype = m.kind[3:]
		}
		if m.off+m.width > cur.size {
			return nil, fmt.Errorf("%s:%d: %s.%s ends at %d, past size %d", path, ln, cur.cname, m.cname, m.off+m.width, cur.size)
		}
		cur.members = append(cur.members, m)
	}
	return out, sc.Err()
}

func isHidden(m member) bool {
	return strings.HasPrefix(m.kind, "rsv") || strings.HasPrefix(m.kind, "pad")
}

func goType(m member) string {
	if m.gotype != "" {
		return m.gotype
	}
	if b := base(m); b != "" {
		return b
	}
	return fmt.Sprintf("[%d]byte", m.width)
}

func base(m member) string {
	switch m.kind {
	case "u8":
		return "uint8"
	case "u16":
		return "uint16"
	case "u32", "be32":
		return "uint32"
	case "s32":
		return "int32"
	case "u64", "be64":
		return "uint64"
	case "s64":
		return "int64"
	}
	return ""
}

func genGo(ls []*layout) []byte {
	var b bytes.Buffer
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p("// Code generated by uverbs/internal/gen from layouts.txt; DO NOT EDIT.\n\npackage uverbs\n\n")
	p("import \"encoding/binary\"\n\n")
	p("var _ = binary.BigEndian\n\n")
	for _, l := range ls {
		p("// %s is struct %s (%d bytes)", l.goname, l.cname, l.size)
		if l.doc != "" {
			p(": %s", l.doc)
		}
		p(".\ntype %s struct {\n", l.goname)
		for _, m := range l.members {
			if isHidden(m) {
				continue
			}
			p("\t%s %s // %s @%d\n", m.goname, goType(m), m.cname, m.off)
		}
		p("}\n\n")
		p("// %sSize is sizeof(struct %s).\nconst %sSize = %d\n\n", l.goname, l.cname, l.goname, l.size)
		p("// Size is the encoded size, %d bytes.\nfunc (*%s) Size() int { return %d }\n\n", l.size, l.goname, l.size)
		p("// Encode writes the struct into b[:%d] and returns %d; reserved bytes are written as zero.\n", l.size, l.size)
		p("func (s *%s) Encode(b []byte) (int, error) {\n\tif len(b) < %d {\n\t\treturn 0, shortBuffer(%q, %d, len(b))\n\t}\n\ts.put(b)\n\treturn %d, nil\n}\n\n", l.goname, l.size, l.cname, l.size, l.size)
		p("// Decode reads the struct from b[:%d]: a shorter b is ErrTruncated", l.size)
		hasRsv := false
		for _, m := range l.members {
			if strings.HasPrefix(m.kind, "rsv") {
				hasRsv = true
			}
		}
		if hasRsv {
			p(", a non-zero reserved byte ErrReserved")
		}
		p(". Bytes past %d are not read.\n", l.size)
		p("func (s *%s) Decode(b []byte) error {\n\tif len(b) < %d {\n\t\treturn truncated(%q, %d, len(b))\n\t}\n\treturn s.get(b)\n}\n\n", l.goname, l.size, l.cname, l.size)
		// put
		p("func (s *%s) put(b []byte) {\n\t_ = b[%d]\n", l.goname, l.size-1)
		for _, m := range l.members {
			o := m.off
			switch {
			case isHidden(m):
				p("\tclear(b[%d:%d])\n", o, o+m.width)
			case strings.HasPrefix(m.kind, "st:"):
				p("\ts.%s.put(b[%d:%d])\n", m.goname, o, o+m.width)
			case m.kind == "u8":
				p("\tb[%d] = uint8(s.%s)\n", o, m.goname)
			case m.kind == "u16":
				p("\tbinary.NativeEndian.PutUint16(b[%d:], uint16(s.%s))\n", o, m.goname)
			case m.kind == "u32" || m.kind == "s32":
				p("\tbinary.NativeEndian.PutUint32(b[%d:], uint32(s.%s))\n", o, m.goname)
			case m.kind == "u64" || m.kind == "s64":
				p("\tbinary.NativeEndian.PutUint64(b[%d:], uint64(s.%s))\n", o, m.goname)
			case m.kind == "be32":
				p("\tbinary.BigEndian.PutUint32(b[%d:], uint32(s.%s))\n", o, m.goname)
			case m.kind == "be64":
				p("\tbinary.BigEndian.PutUint64(b[%d:], uint64(s.%s))\n", o, m.goname)
			default:
				p("\tcopy(b[%d:%d], s.%s[:])\n", o, o+m.width, m.goname)
			}
		}
		p("}\n\n")
		// get
		p("func (s *%s) get(b []byte) error {\n\t_ = b[%d]\n", l.goname, l.size-1)
		for _, m := range l.members {
			o := m.off
			t := goType(m)
			switch {
			case strings.HasPrefix(m.kind, "pad"):
			case strings.HasPrefix(m.kind, "rsv"):
				p("\tif !isZero(b[%d:%d]) {\n\t\treturn reserved(%q, %q, %d)\n\t}\n", o, o+m.width, l.cname, m.cname, o)
			case strings.HasPrefix(m.kind, "st:"):
				p("\tif err := s.%s.get(b[%d:%d]); err != nil {\n\t\treturn nested(%q, %q, %d, err)\n\t}\n", m.goname, o, o+m.width, l.cname, m.cname, o)
			case m.kind == "u8":
				p("\ts.%s = %s(b[%d])\n", m.goname, t, o)
			case m.kind == "u16":
				p("\ts.%s = %s(binary.NativeEndian.Uint16(b[%d:]))\n", m.goname, t, o)
			case m.kind == "u32" || m.kind == "s32":
				p("\ts.%s = %s(binary.NativeEndian.Uint32(b[%d:]))\n", m.goname, t, o)
			case m.kind == "u64" || m.kind == "s64":
				p("\ts.%s = %s(binary.NativeEndian.Uint64(b[%d:]))\n", m.goname, t, o)
			case m.kind == "be32":
				p("\ts.%s = %s(binary.BigEndian.Uint32(b[%d:]))\n", m.goname, t, o)
			case m.kind == "be64":
				p("\ts.%s = %s(binary.BigEndian.Uint64(b[%d:]))\n", m.goname, t, o)
			default:
				p("\tcopy(s.%s[:], b[%d:%d])\n", m.goname, o, o+m.width)
			}
		}
		p("\treturn nil\n}\n\n")
	}
	// The layout table.
	p("// layouts is every struct of layouts.txt with its members, in file order.\nvar layouts = []Layout{\n")
	for _, l := range ls {
		p("\t{Go: %q, C: %q, Size: %d, Members: []Member{\n", l.goname, l.cname, l.size)
		for _, m := range l.members {
			gn := m.goname
			if isHidden(m) {
				gn = ""
			}
			p("\t\t{Go: %q, C: %q, Offset: %d, Width: %d, Kind: %q},\n", gn, m.cname, m.off, m.width, m.kind)
		}
		p("\t}},\n")
	}
	p("}\n\n")
	p("// registry makes a zero value of each struct, in file order (tests, fuzzing).\nvar registry = []func() Struct{\n")
	for _, l := range ls {
		p("\tfunc() Struct { return new(%s) },\n", l.goname)
	}
	p("}\n")
	out, err := format.Source(b.Bytes())
	if err != nil {
		fmt.Fprintln(os.Stderr, b.String())
		panic(err)
	}
	return out
}

func genC(ls []*layout) []byte {
	var b bytes.Buffer
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p("// Code generated by uverbs/internal/gen from uverbs/layouts.txt; DO NOT EDIT.\n")
	p("// Included by cgo.go once the uapi headers are known to exist.\n\n")
	p("#define M(S, F) { #S, #F, (long)offsetof(struct S, F), (long)sizeof(((struct S *)0)->F) }\n")
	p("#define Z(S) { #S, \"\", 0, (long)sizeof(struct S) }\n\n")
	p("static const struct member_layout c_layouts[] = {\n")
	for _, l := range ls {
		p("\tZ(%s),\n", l.cname)
		for _, m := range l.members {
			p("\tM(%s, %s),\n", l.cname, m.cname)
		}
	}
	p("};\n\nstatic const int c_layouts_len = sizeof(c_layouts) / sizeof(c_layouts[0]);\n")
	return b.Bytes()
}

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	ls, err := parse(filepath.Join(dir, "layouts.txt"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(dir, "zz_layouts.go"), genGo(ls), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(dir, "..", "test", "uverbslayout", "zz_ctable.h"), genC(ls), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
