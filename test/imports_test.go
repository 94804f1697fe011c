package test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The allowed import graph of DESIGN.md §3 (docs/architecture.md draws it).
// Keys and entries are package directories relative to the module root.
// A package missing from this table fails the test: adding one is a design
// decision, so add it here (and to the picture) on purpose.
var moduleGraph = map[string]importRule{
	"sim":                 {},
	"mlx5":                {},
	"shm":                 {},
	"mmioring":            {},                        // the SPSC MMIO-record ring across the process boundary: stdlib only (futex via syscall)
	"uverbs":              {allow: []string{"mlx5"}}, // mlx5: the boundary mapping of QPC states and types
	"uverbs/internal/gen": {},                        // go generate: layouts.txt -> Go and the C table
	"trace":               {allow: []string{"sim"}},
	"fault":               {allow: []string{"sim"}},
	"pcie":                {allow: []string{"sim", "trace", "fault"}},
	"roce":                {allow: []string{"sim", "trace", "fault"}},
	"wire":                {allow: []string{"sim", "trace", "fault", "internal/tuntap"}}, // real transports: TAP ioctls
	"internal/tuntap":     {},
	"internal/kverbs":     {allow: []string{"uverbs"}}, // the kernel's /dev/infiniband/uverbsN: sysfs, fds, mmap; bytes come from uverbs
	"internal/perfreport": {},                          // docs/performance.sh: runs the benchmarks, writes docs/performance.md
	"internal/freeport":   {},                          // tests only: loopback ports picked free and never handed out twice
	"ethport":             {allow: []string{"sim", "trace", "roce", "wire"}},
	"env":                 {allow: []string{"sim", "trace", "fault"}},                               // the one environment of a device's engines
	"bar":                 {allow: []string{"pcie", "mlx5", "sim", "trace", "env", "fault"}},        // the device end of BAR0; never the host CPU in front of it
	"host":                {allow: []string{"pcie", "sim", "trace", "mlx5", "fault", "env"}},        // the host CPU: WC buffer, store and provider-work costs; not device, bar or provider
	"dma":                 {allow: []string{"pcie", "shm", "sim", "trace", "fault", "mlx5", "env"}}, // mlx5: access bits, data segments, syndromes (DESIGN.md §3 amended)
	"wqefetch":            {allow: []string{"dma", "mlx5", "sim", "trace", "fault", "env"}},
	"device":              {allow: []string{"sim", "mlx5", "uverbs", "shm", "trace", "fault", "pcie", "roce", "wire", "bar", "dma", "wqefetch", "env"}},
	"provider":            {allow: []string{"mlx5", "uverbs", "shm", "pcie", "host", "sim", "attach", "mmioring", "internal/kverbs"}, uses: map[string][]string{"pcie": {"MMIO", "LineStorer", "BARPort", "FlowPort"}}}, // host, sim, attach, mmioring: the dialled backend (a host CPU in front of the daemon's ring, provider/dial.go); BARPort/FlowPort: that ring's end; internal/kverbs: the kernel backends (provider/kernel.go)
	"attach":              {allow: []string{}},                                                                                                                                                                          // the daemon's client protocol: stdlib only
	"serve":               {allow: []string{"attach", "device", "mmioring", "pcie", "profile", "shm", "sim", "trace", "uverbs", "uverbsdev", "wire", "mlx5", "ethport", "wallclock"}},                                   // the daemon: devices behind a socket and rings
	"profile":             {allow: []string{"device", "host", "wire", "pcie", "bar", "dma", "sim"}},                                                                                                                     // device (and host CPU) profiles as data
	"uverbsdev":           {allow: []string{"device", "mlx5", "uverbs", "shm", "sim"}},                                                                                                                                  // the device end of the uverbs control channel
	"testbed":             {any: true, deny: []string{"cmd"}},                                                                                                                                                           // assembles worlds for cmd and test
	"calibrate":           {any: true, deny: []string{"cmd"}},                                                                                                                                                           // measures the model against timing.md, writes docs/calibration.md
	"wallclock":           {allow: []string{"device", "provider", "ethport", "wire", "fault", "profile", "trace", "sim", "shm", "mlx5", "pcie", "roce", "uverbs", "host", "testbed"}},
	"cmd/softnic":         {any: true},
	"test":                {any: true},
	"test/interop":        {any: true},            // the Soft-RoCE (rxe in qemu) interop harness
	"test/conformance":    {any: true},            // the provider's conformance suite, on every backend present
	"test/uverbslayout":   {any: true, cgo: true}, // cgo: uverbs layouts against the uapi headers
}

// importRule is what one module package may import from the module.
type importRule struct {
	allow []string // module packages it may import
	any   bool     // any module package (except those under deny)
	deny  []string // with any: these packages and everything below them
	// uses restricts which exported names of an allowed import a package
	// may refer to: the provider sees pcie only through the MMIO port.
	uses map[string][]string
	// cgo: the package may import "C" (only the layout test against the
	// uapi headers; DESIGN.md keeps cgo out of everything that ships).
	cgo bool
}

func (r importRule) allows(pkg string) bool {
	if r.any {
		for _, d := range r.deny {
			if pkg == d || strings.HasPrefix(pkg, d+"/") {
				return false
			}
		}
		return true
	}
	return slices.Contains(r.allow, pkg)
}

// thirdParty lists the only non-module, non-stdlib imports. Each module
// path prefix names the packages whose non-test files may import it (nil:
// none; testOnly: any package's _test.go files may).
var thirdParty = []struct {
	prefix   string
	pkgs     []string
	testOnly bool
}{
	// wallclock: its capture is stamped with the wall clock, which trace's pcap writer does not do.
	{"github.com/google/gopacket", []string{"roce", "trace", "wire", "ethport", "wallclock", "test", "cmd/softnic"}, false},
	// shm maps memory; internal/kverbs makes the uverbs system calls
	// (ioctl, write, mmap, poll) of the kernel backends.
	{"golang.org/x/sys", []string{"shm", "internal/tuntap", "internal/kverbs"}, false},
	{"github.com/stretchr/testify", nil, true},
}

// fileImports is one Go file's imports, plus the exported names it selects
// from each imported package (for importRule.uses).
type fileImports struct {
	pkg     string // package directory relative to the module root
	file    string
	test    bool // a _test.go file
	imports []string
	uses    map[string][]string // import path -> selected names
}

// checkImports returns one line per violation of the rules above.
func checkImports(module string, files []fileImports) []string {
	var bad []string
	report := func(f fileImports, format string, args ...any) {
		bad = append(bad, f.file+": "+fmt.Sprintf(format, args...))
	}
	unknown := map[string]bool{}
	for _, f := range files {
		rule, known := moduleGraph[f.pkg]
		if !known {
			if !unknown[f.pkg] {
				unknown[f.pkg] = true
				bad = append(bad, fmt.Sprintf("package %s is not in the allowed import graph (test/imports_test.go, DESIGN.md §3)", f.pkg))
			}
			continue
		}
		for _, imp := range f.imports {
			switch {
			case imp == "C" && !rule.cgo:
				report(f, "cgo is not allowed")
			case imp == module || strings.HasPrefix(imp, module+"/"):
				dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
				if f.test || dep == f.pkg {
					continue // tests may reach further; the graph is about shipped code
				}
				if !rule.allows(dep) {
					report(f, "%s imports %s, outside the allowed graph", f.pkg, dep)
					continue
				}
				if names, ok := rule.uses[dep]; ok {
					for _, n := range f.uses[imp] {
						if !slices.Contains(names, n) {
							report(f, "%s may use only %v from %s, not %s", f.pkg, names, dep, n)
						}
					}
				}
			case isStdlib(imp):
			default:
				ok := false
				for _, tp := range thirdParty {
					if imp != tp.prefix && !strings.HasPrefix(imp, tp.prefix+"/") {
						continue
					}
					ok = (tp.testOnly && f.test) || slices.Contains(tp.pkgs, f.pkg)
					break
				}
				if !ok {
					report(f, "%s may not import third-party %s", f.pkg, imp)
				}
			}
		}
	}
	return bad
}

// isStdlib: standard-library paths have no dot in their first element.
func isStdlib(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".")
}

// moduleRoot finds go.mod above the test's directory and returns its
// directory and module path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for line := range strings.SplitSeq(string(data), "\n") {
				if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("no module line in %s/go.mod", dir)
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "go.mod not found")
		dir = parent
	}
}

// scanModule parses every .go file of the module (skipping testdata,
// vendor, hidden and _-prefixed directories and nested modules).
func scanModule(t *testing.T, root string) []fileImports {
	t.Helper()
	var files []fileImports
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		af, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		fi := fileImports{pkg: path.Dir(filepath.ToSlash(rel)), file: filepath.ToSlash(rel),
			test: strings.HasSuffix(name, "_test.go"), uses: map[string][]string{}}
		local := map[string]string{} // name in this file -> import path
		for _, is := range af.Imports {
			imp, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return err
			}
			fi.imports = append(fi.imports, imp)
			n := path.Base(imp)
			if is.Name != nil {
				n = is.Name.Name
			}
			local[n] = imp
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok {
					if imp, ok := local[id.Name]; ok {
						fi.uses[imp] = append(fi.uses[imp], sel.Sel.Name)
					}
				}
			}
			return true
		})
		files = append(files, fi)
		return nil
	})
	require.NoError(t, err)
	return files
}

// TestImportGraph enforces DESIGN.md §3 on the whole module.
func TestImportGraph(t *testing.T) {
	root, module := moduleRoot(t)
	files := scanModule(t, root)
	require.NotEmpty(t, files)
	pkgs := map[string]bool{}
	for _, f := range files {
		pkgs[f.pkg] = true
	}
	require.True(t, pkgs["mlx5"] && pkgs["sim"] && pkgs["test"], "scan found the module's packages: %v", pkgs)
	if bad := checkImports(module, files); len(bad) > 0 {
		sort.Strings(bad)
		t.Fatalf("import rules violated (DESIGN.md §3):\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestImportGraphIsAcyclic checks the table itself: the explicit allow lists
// must form a DAG, and every allowed package must be in the table.
func TestImportGraphIsAcyclic(t *testing.T) {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var visit func(p string, stack []string)
	visit = func(p string, stack []string) {
		switch color[p] {
		case grey:
			t.Fatalf("allowed graph has a cycle: %s -> %s", strings.Join(stack, " -> "), p)
		case black:
			return
		}
		color[p] = grey
		for _, d := range moduleGraph[p].allow {
			_, ok := moduleGraph[d]
			require.True(t, ok, "%s allows unknown package %s", p, d)
			visit(d, append(stack, p))
		}
		color[p] = black
	}
	for p := range moduleGraph {
		visit(p, nil)
	}
}

// TestCheckImports feeds the checker synthetic files, so that each rule is
// seen to fail.
func TestCheckImports(t *testing.T) {
	const mod = "example.com/m"
	file := func(pkg string, test bool, imports ...string) fileImports {
		name := pkg + "/x.go"
		if test {
			name = pkg + "/x_test.go"
		}
		return fileImports{pkg: pkg, file: name, test: test, imports: imports, uses: map[string][]string{}}
	}
	withUses := func(f fileImports, imp string, names ...string) fileImports {
		f.uses[imp] = names
		return f
	}
	tests := []struct {
		name string
		file fileImports
		want string // substring of the single violation; "" = clean
	}{
		{"leaf on stdlib", file("mlx5", false, "encoding/binary", "unsafe"), ""},
		{"leaf imports module package", file("mlx5", false, mod+"/sim"), "mlx5 imports sim, outside"},
		{"sim imports trace (cycle)", file("sim", false, mod+"/trace"), "sim imports trace"},
		{"allowed edge", file("wqefetch", false, mod+"/dma", mod+"/mlx5", mod+"/fault"), ""},
		{"bar may not use dma", file("bar", false, mod+"/dma"), "bar imports dma"}, // bar owns the wc.buffer and pcie.tlp fault points
		{"provider reaches into device", file("provider", false, mod+"/device"), "provider imports device"},
		{"provider uses the MMIO port", withUses(file("provider", false, mod+"/pcie"), mod+"/pcie", "MMIO"), ""},
		{"provider uses pcie link model", withUses(file("provider", false, mod+"/pcie"), mod+"/pcie", "MMIO", "Link"),
			"may use only [MMIO LineStorer BARPort FlowPort] from pcie, not Link"},
		{"testbed assembles the device", file("testbed", false, mod+"/device", mod+"/provider", mod+"/wire"), ""},
		{"testbed imports cmd", file("testbed", false, mod+"/cmd/softnic"), "testbed imports cmd/softnic"},
		{"test imports anything", file("test", true, mod+"/device", mod+"/cmd/softnic", "github.com/google/gopacket/layers"), ""},
		{"unknown package", file("newthing", false, "fmt"), "package newthing is not in the allowed import graph"},
		{"unknown nested package", file("trace/chrome", false), "package trace/chrome is not in"},
		{"gopacket in roce", file("roce", false, "github.com/google/gopacket/layers"), ""},
		{"gopacket in mlx5", file("mlx5", false, "github.com/google/gopacket"), "mlx5 may not import third-party github.com/google/gopacket"},
		{"x/sys in shm", file("shm", false, "golang.org/x/sys/unix"), ""},
		{"x/sys in dma", file("dma", false, "golang.org/x/sys/unix"), "dma may not import third-party golang.org/x/sys/unix"},
		{"testify in a test", file("sim", true, "github.com/stretchr/testify/require"), ""},
		{"testify in shipped code", file("sim", false, "github.com/stretchr/testify/require"), "sim may not import third-party github.com/stretchr/testify/require"},
		{"other third party in a test", file("sim", true, "github.com/google/go-cmp/cmp"), "may not import third-party github.com/google/go-cmp/cmp"},
		{"prefix lookalike", file("shm", false, "golang.org/x/sysfoo"), "may not import third-party golang.org/x/sysfoo"},
		{"tests may import across the graph", file("mlx5", true, mod+"/sim"), ""},
		{"cgo", file("shm", false, "C"), "cgo is not allowed"},
		{"wire opens TAPs through internal/tuntap", file("wire", false, mod+"/internal/tuntap", mod+"/trace"), ""},
		{"x/sys in internal/tuntap", file("internal/tuntap", false, "golang.org/x/sys/unix"), ""},
		{"internal/tuntap stays a leaf", file("internal/tuntap", false, mod+"/sim"), "internal/tuntap imports sim"},
		{"ethport hands frames to a wire.Receiver", file("ethport", false, mod+"/wire", mod+"/roce", mod+"/sim"), ""},
		{"ethport reaches into device", file("ethport", false, mod+"/device"), "ethport imports device"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := checkImports(mod, []fileImports{tc.file})
			if tc.want == "" {
				require.Empty(t, bad)
				return
			}
			require.Len(t, bad, 1, "violations: %v", bad)
			require.Contains(t, bad[0], tc.want)
			require.Contains(t, bad[0], tc.file.pkg)
		})
	}
}
