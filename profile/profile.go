package profile

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/softnic/softnic/bar"
	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/wire"
)

// DefaultName is the profile every command runs when none is named.
const DefaultName = "cx5-gen3x16"

//go:embed data/*.json
var files embed.FS

// ErrProfile is wrapped by every error of Load and Parse.
var ErrProfile = errors.New("profile")

// Error names the profile, and the field when one is at fault.
type Error struct {
	Source string // embedded name or file path
	Field  string // JSON path, e.g. device.pcie.lanes; "" for the whole file
	Msg    string
	Err    error // underlying error, if any
	// NotFound: Source names neither a built-in profile nor a file
	// (errors.Is(err, ErrNoSuchProfile)).
	NotFound bool
}

// ErrNoSuchProfile matches a Load of a name that is no built-in profile
// and no file: a bad argument rather than a bad file.
var ErrNoSuchProfile = errors.New("no such profile")

func (e *Error) Error() string {
	s := "profile " + e.Source
	if e.Field != "" {
		s += ": field " + e.Field
	}
	s += ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap gives ErrProfile, ErrNoSuchProfile when NotFound, and the
// underlying error.
func (e *Error) Unwrap() []error {
	errs := []error{ErrProfile}
	if e.NotFound {
		errs = append(errs, ErrNoSuchProfile)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Profile is a device model and the wire it is cabled to, with the source
// of every number.
type Profile struct {
	Name        string
	Description string
	Base        string // the profile this one starts from ("" = none)
	Source      string // "embedded" or the file it was read from
	Device      device.Spec
	Wire        wire.Spec
	// Cite maps a JSON path (a field, or a section covering all its
	// fields) to the source of its number(s).
	Cite map[string]string

	cpu hostFields // the host CPU's numbers (Host)
}

// deviceFile is the "device" object of a profile file: the device's Spec
// and the host CPU's numbers, which a profile keeps where they have always
// stood — the write-combining buffer and store costs under bar, the
// provider's work costs under host — although the device no longer holds
// them (Profile.Host gives them as a host.Config). encoding/json lets the
// outer bar field stand for the embedded Spec's.
type deviceFile struct {
	device.Spec
	BAR  barFile  `json:"bar"`
	Host hostWork `json:"host"`
}

// barFile is the bar section: BAR0's fields and the CPU's.
type barFile struct {
	bar.Config
	hostBAR
}

// hostBAR are the host CPU's fields of the bar section.
type hostBAR struct {
	// UARNonCached maps UAR pages uncached (host.Config.UARNonCached).
	UARNonCached bool         `json:"uar_non_cached,omitempty"`
	WCLines      int          `json:"wc_lines"`         // host.Config.WCLines
	StoreCost    sim.Duration `json:"store_cost_ps"`    // host.Config.StoreCost
	UCStoreCost  sim.Duration `json:"uc_store_cost_ps"` // host.Config.UCStoreCost
}

// hostWork is the host section: the provider's work costs (host.Config).
type hostWork struct {
	WQEBuild  sim.Duration `json:"wqe_build_ps"`  // per WQE
	PerWQEBB  sim.Duration `json:"per_wqebb_ps"`  // extra per 64-byte basic block
	DBRUpdate sim.Duration `json:"dbr_update_ps"` // doorbell-record store + barrier
	PollCQE   sim.Duration `json:"poll_cqe_ps"`   // reading one CQE after the owner flip
}

// hostFields are a profile's host CPU numbers, as its file gives them.
type hostFields struct {
	bar  hostBAR
	work hostWork
}

// file is p's device object in the file's layout.
func (p *Profile) file() deviceFile {
	return deviceFile{Spec: p.Device, BAR: barFile{Config: p.Device.BAR, hostBAR: p.cpu.bar}, Host: p.cpu.work}
}

// setFile takes p's device and host CPU back from the file's layout.
func (p *Profile) setFile(f *deviceFile) {
	p.Device = f.Spec
	p.Device.BAR = f.BAR.Config
	p.cpu = hostFields{bar: f.BAR.hostBAR, work: f.Host}
}

// Host is the host CPU the profile describes, in front of its device's
// BAR0 (whose layout it carries): device.bar's uar_non_cached, wc_lines,
// wc_drain_ps, store_cost_ps and uc_store_cost_ps and device.host's work
// costs.
func (p Profile) Host() host.Config {
	b, h := p.Device.BAR, p.cpu
	return host.Config{
		Layout:       host.Layout{FirstUAR: b.FirstUAR, NumUARs: b.NumUARs, BFRegSize: b.BFRegSize},
		UARNonCached: h.bar.UARNonCached, WCLines: h.bar.WCLines, WCDrain: b.WCDrain,
		StoreCost: h.bar.StoreCost, UCStoreCost: h.bar.UCStoreCost,
		WQEBuild: h.work.WQEBuild, PerWQEBB: h.work.PerWQEBB, DBRUpdate: h.work.DBRUpdate, PollCQE: h.work.PollCQE,
	}
}

// Walk calls fn for every field of the profile's device and wire objects
// in the file's layout (device.bar.wc_lines, wire.rate_bps, ...), with
// its value.
func (p Profile) Walk(fn func(path string, v any)) {
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		if v.Kind() != reflect.Struct {
			fn(path, v.Interface())
			return
		}
		for _, f := range structFields(v.Type()) {
			walk(path+"."+f.name, v.FieldByIndex(f.index))
		}
	}
	walk("device", reflect.ValueOf(p.file()))
	walk("wire", reflect.ValueOf(p.Wire))
}

// Citation returns the source given for the field at path p, looking up
// the enclosing sections too.
func (p Profile) Citation(field string) (string, bool) {
	for f := field; f != ""; {
		if c, ok := p.Cite[f]; ok {
			return c, true
		}
		i := strings.LastIndexByte(f, '.')
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return "", false
}

var embedded = map[string]Profile{}

func init() {
	ents, err := files.ReadDir("data")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	// Load bases first: a profile names its base; resolve lazily.
	raw := map[string][]byte{}
	for _, e := range ents {
		b, err := files.ReadFile(path.Join("data", e.Name()))
		if err != nil {
			panic(err)
		}
		raw[strings.TrimSuffix(e.Name(), ".json")] = b
	}
	var load func(name string, depth int) Profile
	load = func(name string, depth int) Profile {
		if p, ok := embedded[name]; ok {
			return p
		}
		b, ok := raw[name]
		if !ok || depth > 4 {
			panic("profile: embedded base " + name + " missing or cyclic")
		}
		p, err := parse(b, name, "embedded", func(base string) (Profile, error) { return load(base, depth+1), nil }, "")
		if err != nil {
			panic(err) // tested: every embedded profile parses
		}
		embedded[name] = p
		return p
	}
	for name := range raw {
		load(name, 0)
	}
}

// Names lists the embedded profiles, the default first.
func Names() []string {
	ns := make([]string, 0, len(embedded))
	for n := range embedded {
		if n != DefaultName {
			ns = append(ns, n)
		}
	}
	sort.Strings(ns)
	return append([]string{DefaultName}, ns...)
}

// All returns the embedded profiles in Names order.
func All() []Profile {
	var ps []Profile
	for _, n := range Names() {
		ps = append(ps, embedded[n])
	}
	return ps
}

// Get returns an embedded profile by name.
func Get(name string) (Profile, bool) {
	p, ok := embedded[name]
	return p, ok
}

// Default returns the default profile.
func Default() Profile { return embedded[DefaultName] }

// Load returns the profile called nameOrFile: the default for "", an
// embedded profile by name, or else a JSON profile file.
func Load(nameOrFile string) (Profile, error) {
	if nameOrFile == "" {
		return Default(), nil
	}
	if p, ok := embedded[nameOrFile]; ok {
		return p, nil
	}
	b, err := readFile(nameOrFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(nameOrFile, "/.") {
			return Profile{}, &Error{Source: nameOrFile, Msg: "no such profile (have " + strings.Join(Names(), ", ") + ") and no such file", NotFound: true}
		}
		return Profile{}, &Error{Source: nameOrFile, Msg: "cannot read", Err: err, NotFound: errors.Is(err, os.ErrNotExist)}
	}
	return Parse(b, nameOrFile)
}

// MaxFileSize is the largest profile file Load reads (1 MiB: the embedded
// profiles are a few KiB each).
const MaxFileSize = 1 << 20

// ErrFileTooLarge is wrapped, with ErrProfile, by Load for a file of more
// than MaxFileSize bytes.
var ErrFileTooLarge = errors.New("profile file too large")

// readFile reads at most MaxFileSize bytes of name: /dev/zero, a FIFO fed
// by a runaway generator or a capture given by mistake must end in an
// error, not in reading until memory runs out.
func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrFileTooLarge, MaxFileSize)
	}
	return b, nil
}

// Parse reads a profile file. The file is a JSON object with the keys
// name, description, base (an embedded profile to start from, default
// cx5-gen3x16), device (fields of device.Spec), wire (fields of
// wire.Spec) and cite; device's sections (pcie, bar, dma, core, host,
// caps, transport, events) may also stand at the top level. Fields not
// given keep the base's values. Unknown keys, values of the wrong type,
// zero or negative numbers and PCIe shapes that do not exist are errors
// naming the field.
func Parse(b []byte, file string) (Profile, error) {
	label := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	return parse(b, file, file, func(base string) (Profile, error) {
		p, ok := embedded[base]
		if !ok {
			return Profile{}, &Error{Source: file, Field: "base", Msg: fmt.Sprintf("no embedded profile %q (have %s)", base, strings.Join(Names(), ", "))}
		}
		return p, nil
	}, label)
}

var profileKeys = map[string]bool{"name": true, "description": true, "base": true, "device": true, "wire": true, "cite": true}

func parse(b []byte, name, source string, base func(string) (Profile, error), label string) (Profile, error) {
	fail := func(field, msg string, err error) (Profile, error) {
		return Profile{}, &Error{Source: name, Field: field, Msg: msg, Err: err}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var top map[string]any
	if err := dec.Decode(&top); err != nil {
		return fail("", "not a JSON object", err)
	}
	if top == nil {
		// null decodes into a map without error, as the empty map it
		// is not: a file of null is no profile (an empty object {} is:
		// the base unchanged).
		return fail("", "not a JSON object (null)", nil)
	}
	if dec.More() {
		return fail("", "trailing data after the JSON object", nil)
	}
	devT := reflect.TypeOf(deviceFile{})
	devKeys := jsonFields(devT)
	dev, _ := top["device"].(map[string]any)
	if _, ok := top["device"]; ok && dev == nil {
		return fail("device", "must be an object", nil)
	}
	for k, v := range top {
		if profileKeys[k] {
			continue
		}
		if _, ok := devKeys[k]; ok && k != "name" {
			if dev == nil {
				dev = map[string]any{}
			}
			if _, dup := dev[k]; dup {
				return fail(k, "given both at the top level and under device", nil)
			}
			dev[k] = v
			continue
		}
		return fail(k, "unknown key (want name, description, base, device, wire, cite or a device section)", nil)
	}
	if err := checkKeys("device", dev, devT); err != nil {
		return fail(err.field, err.msg, nil)
	}
	wireMap, _ := top["wire"].(map[string]any)
	if _, ok := top["wire"]; ok && wireMap == nil {
		return fail("wire", "must be an object", nil)
	}
	if err := checkKeys("wire", wireMap, reflect.TypeOf(wire.Spec{})); err != nil {
		return fail(err.field, err.msg, nil)
	}
	str := func(k string) (string, error) {
		v, ok := top[k]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", &Error{Source: name, Field: k, Msg: "must be a string"}
		}
		return s, nil
	}
	var p Profile
	var err error
	if p.Name, err = str("name"); err != nil {
		return Profile{}, err
	}
	if p.Description, err = str("description"); err != nil {
		return Profile{}, err
	}
	if p.Base, err = str("base"); err != nil {
		return Profile{}, err
	}
	if p.Base == "" && source != "embedded" {
		p.Base = DefaultName // a file starts from the default
	}
	p.Cite = map[string]string{}
	if p.Base != "" {
		bp, err := base(p.Base)
		if err != nil {
			return Profile{}, err
		}
		p.Device, p.Wire, p.cpu = bp.Device, bp.Wire, bp.cpu
		for k, v := range bp.Cite {
			p.Cite[k] = v
		}
	}
	fileCite, _ := top["cite"].(map[string]any)
	if c, ok := top["cite"]; ok {
		cm, ok := c.(map[string]any)
		if !ok {
			return fail("cite", "must be an object of strings", nil)
		}
		for k, v := range cm {
			s, ok := v.(string)
			if !ok {
				return fail("cite."+k, "must be a string", nil)
			}
			p.Cite[k] = s
		}
	}
	if source != "embedded" {
		// A field the file sets keeps no citation of the base's, which
		// cites the base's value (`softnic profiles FILE` showed "MPS
		// 256" beside an MPS of 128): it says where the value came
		// from, unless the file cites it or a section holding it.
		own := "set by " + source + " (no citation given)"
		var mark func(path string, m map[string]any)
		mark = func(path string, m map[string]any) {
			for k, v := range m {
				if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
					mark(path+"."+k, sub)
					continue
				}
				f := path + "." + k
				switch _, leaf := fileCite[f]; {
				case !citedByFile(fileCite, f):
					p.Cite[f] = own
				case !leaf:
					delete(p.Cite, f) // the file's section citation, not the base's of this field
				}
			}
		}
		mark("device", dev)
		mark("wire", wireMap)
	}
	if dev != nil {
		db, _ := json.Marshal(dev)
		f := p.file()
		if err := json.Unmarshal(db, &f); err != nil {
			return fail("device", "cannot decode", err)
		}
		p.setFile(&f)
	}
	if wireMap != nil {
		wb, _ := json.Marshal(wireMap)
		if err := json.Unmarshal(wb, &p.Wire); err != nil {
			return fail("wire", "cannot decode", err)
		}
	}
	if p.Name == "" {
		p.Name = label
		if dn, _ := dev["name"].(string); dn != "" {
			p.Name = dn
		}
	}
	if p.Name == "" {
		return fail("name", "missing", nil)
	}
	p.Device.Name = p.Name
	p.Source = source
	if err := validate(&p); err != nil {
		err.Source = name
		return Profile{}, err
	}
	return p, nil
}

type keyErr struct{ field, msg string }

// jsonFields maps a struct type's JSON names to its fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	m := map[string]reflect.StructField{}
	for _, f := range structFields(t) {
		m[f.name] = t.FieldByIndex(f.index)
	}
	return m
}

// jsonField is one field of a struct as encoding/json sees it.
type jsonField struct {
	name  string // JSON name
	index []int  // reflect.Value.FieldByIndex path (through embedded structs)
	tag   bool   // the name comes from a json tag
}

// structFields lists t's fields as encoding/json sees them: exported,
// not "-", the fields of untagged embedded structs promoted in place
// unless an outer field has the same name (the outer one wins, and stands
// where the field it hides stood).
func structFields(t reflect.Type) []jsonField {
	name := func(f reflect.StructField) (string, bool, bool) { // name, tagged, promoted
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			return "", false, true
		}
		if !f.IsExported() || tag == "-" {
			return "", false, false
		}
		if tag == "" {
			return f.Name, false, false
		}
		return tag, true, false
	}
	outer := map[string]jsonField{}
	for i := 0; i < t.NumField(); i++ {
		if n, tagged, _ := name(t.Field(i)); n != "" {
			outer[n] = jsonField{name: n, index: t.Field(i).Index, tag: tagged}
		}
	}
	var out []jsonField
	done := map[string]bool{}
	add := func(f jsonField) {
		if !done[f.name] {
			done[f.name] = true
			out = append(out, f)
		}
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		n, _, promoted := name(f)
		if !promoted {
			if n != "" {
				add(outer[n])
			}
			continue
		}
		for _, sub := range structFields(f.Type) {
			if o, ok := outer[sub.name]; ok {
				add(o)
				continue
			}
			sub.index = append(append([]int(nil), f.Index...), sub.index...)
			add(sub)
		}
	}
	return out
}

// checkKeys checks a decoded JSON value against type t: known keys only,
// numbers where numbers go, and so on.
func checkKeys(p string, v any, t reflect.Type) *keyErr {
	if v == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return &keyErr{p, "must be an object"}
		}
		fs := jsonFields(t)
		for k, sub := range m {
			f, ok := fs[k]
			if !ok {
				names := make([]string, 0, len(fs))
				for n := range fs {
					names = append(names, n)
				}
				sort.Strings(names)
				return &keyErr{p + "." + k, "unknown key (known: " + strings.Join(names, ", ") + ")"}
			}
			if err := checkKeys(p+"."+k, sub, f.Type); err != nil {
				return err
			}
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return &keyErr{p, "must be true or false"}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return &keyErr{p, "must be a string"}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			return &keyErr{p, "must be a number"}
		}
		if _, err := n.Int64(); err != nil {
			if _, err := strconv.ParseUint(n.String(), 10, 64); err != nil {
				if f, err := n.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
					return &keyErr{p, "must be written as an integer (no fraction or exponent), got " + n.String()}
				}
				return &keyErr{p, "must be a whole number in range, got " + n.String()}
			}
		}
		if strings.HasPrefix(n.String(), "-") && t.Kind() >= reflect.Uint {
			return &keyErr{p, "must not be negative, got " + n.String()}
		}
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			return &keyErr{p, "must be a number"}
		}
		if f, err := n.Float64(); err != nil || math.IsInf(f, 0) {
			return &keyErr{p, "not a finite number: " + n.String()}
		}
	}
	return nil
}

// mayBeZero lists the fields where 0 means something (not "forgotten").
var mayBeZero = map[string]string{
	"device.pcie.ack_limit":             "0 = the PCIe spec table",
	"device.pcie.fc_guide":              "0 = the PCIe spec table",
	"device.bar.bf_reg_size":            "0 = no BlueFlame",
	"device.core.tx_buffer_bytes":       "0 = an unbounded transmit buffer",
	"device.bar.fw_rev.major":           "a version number",
	"device.bar.fw_rev.minor":           "a version number",
	"device.bar.fw_rev.sub":             "a version number",
	"device.caps.hw_ver":                "a version number",
	"device.pcie.host_read_per_line_ps": "0 = no per-line host cost",
}

// Bounds that keep the model's int64 picosecond arithmetic from wrapping
// (a stage's time is a sum of a few such terms, and the clock runs for
// hours at most): a duration (a *_ps field) of at most 1000 s, a cycle
// count of at most 10^9 at a clock of at least 1 MHz (10^9 x 10^6 ps =
// 1000 s), and a wire of at least 1 Mb/s (a 4 KiB frame then takes 33 ms).
const (
	maxPS      = 1e15
	maxCycles  = 1e9
	minClockHz = 1e6
	minRateBPS = 1e6
	// maxTxBuffer bounds device.core.tx_buffer_bytes (1 GiB).
	maxTxBuffer = 1 << 30
	maxRateBPS  = 1e14
	// maxClockHz: a cycle of a faster clock is under the model's 1 ps
	// and rounds to no time at all.
	maxClockHz = 1e12
	// maxWireMTU: wire.mtu is the largest IP packet, whose length an
	// IPv4 header holds in 16 bits.
	maxWireMTU = 65535

	maxEQEntries = 1 << 16
	maxRQPolls   = 1 << 10
)

// toolNeeds are the least capabilities the commands' QPs ask of a device
// (testbed.ConnOpts and perf's defaults): a profile below them could load
// but no trace, stat or perf could run on it, each failing only at
// create_qp with the device's limit, so the loader names the field.
// (max_inline is not among them: perf cuts its default to the device's,
// and an inline walk larger than the device takes is refused as such.)
var toolNeeds = []struct {
	field string
	get   func(d *device.Spec) int
	min   int
	why   string
}{
	{"device.caps.max_sge", func(d *device.Spec) int { return d.Caps.MaxSGE }, 4, "the tools' QPs take 4 SGEs"},
	{"device.caps.max_qp_wr", func(d *device.Spec) int { return d.Caps.MaxQPWR }, 128, "perf's send queues are 128 deep"},
	{"device.caps.max_cqe", func(d *device.Spec) int { return d.Caps.MaxCQE }, 4096, "the tools' CQs take up to 4096 entries"},
	{"device.caps.max_cq", func(d *device.Spec) int { return d.Caps.MaxCQ }, 16, "a walk with SRQ and events uses several CQs a node"},
	{"device.caps.max_qp_rd_atom", func(d *device.Spec) int { return d.Caps.MaxRdAtom }, 16, "the tools' RC QPs ask max_rd_atomic 16 (ibv_rc_pingpong's and perftest's)"},
}

// validate checks every number of p (positive unless listed in mayBeZero)
// and the shapes the packages define.
func validate(p *Profile) *Error {
	if err := walkNumbers("device", reflect.ValueOf(p.file())); err != nil {
		return err
	}
	if err := walkNumbers("wire", reflect.ValueOf(p.Wire)); err != nil {
		return err
	}
	field := func(f string, err error) *Error { return &Error{Field: f, Msg: "invalid", Err: err} }
	d := p.Device
	if err := d.PCIe.Validate(); err != nil {
		return field("device.pcie", err)
	}
	if err := d.BAR.Validate(); err != nil {
		return field("device.bar", err)
	}
	if err := p.Host().Validate(); err != nil {
		return field("device.bar", err)
	}
	if err := p.Wire.Validate(); err != nil {
		return field("wire", err)
	}
	for _, c := range []struct {
		field  string
		v      float64
		lo, hi float64
		unit   string
	}{
		{"device.core.clock_hz", float64(d.Core.Clock), minClockHz, maxClockHz, "Hz"},
		{"device.bar.core_clock_hz", float64(d.BAR.CoreClock), minClockHz, maxClockHz, "Hz"},
		{"wire.rate_bps", float64(p.Wire.Rate), minRateBPS, maxRateBPS, "b/s"},
	} {
		if c.v < c.lo || c.v > c.hi {
			return &Error{Field: c.field, Msg: fmt.Sprintf("%g %s is outside %g..%g %s: slower clocks and wires, or faster wires, would wrap the model's int64 picoseconds, and a faster clock's cycle is under its 1 ps", c.v, c.unit, c.lo, c.hi, c.unit)}
		}
	}
	for _, n := range toolNeeds {
		if v := n.get(&d); v < n.min {
			return &Error{Field: n.field, Msg: fmt.Sprintf("%d is below %d: %s", v, n.min, n.why)}
		}
	}
	// No send WQE is larger than max_sq_desc_sz (16 WQEBBs, 1024 B), and
	// a UD one's fixed part (ctrl + datagram segment, 64 B) is the largest:
	// a max_sge or max_inline it cannot hold would be reported to every
	// QP and refused to each that asked it.
	if n, most := d.Caps.MaxSGE, device.MaxCapSGE; n > most {
		return &Error{Field: "device.caps.max_sge", Msg: fmt.Sprintf("%d exceeds %d: a UD send WQE (1024 B at most, 64 B of them fixed) holds no more", n, most)}
	}
	if n, most := d.Caps.MaxInline, device.MaxCapInline; n > most {
		return &Error{Field: "device.caps.max_inline", Msg: fmt.Sprintf("%d exceeds %d: a UD send WQE (1024 B at most, 64 B of them fixed, 4 B of inline header) holds no more", n, most)}
	}
	if d.Caps.MaxRdAtom > 255 {
		return &Error{Field: "device.caps.max_qp_rd_atom", Msg: fmt.Sprintf("%d exceeds 255: max_rd_atomic is a u8 in the verbs ABI", d.Caps.MaxRdAtom)}
	}
	if n := d.Events.EQEntries; n > maxEQEntries {
		return &Error{Field: "device.events.eq_entries", Msg: fmt.Sprintf("%d exceeds %d: each EQ lives in the host memory of the context (64 B an entry)", n, maxEQEntries)}
	}
	if n := d.Core.TxBufferBytes; n > maxTxBuffer {
		return &Error{Field: "device.core.tx_buffer_bytes", Msg: fmt.Sprintf("%d exceeds %d: its wire time at the slowest wire would wrap the model's int64 picoseconds", n, maxTxBuffer)}
	}
	if n := d.Core.RQPolls; n > maxRQPolls {
		return &Error{Field: "device.core.rq_polls", Msg: fmt.Sprintf("%d exceeds %d: each re-read of the doorbell record is an event", n, maxRQPolls)}
	}
	switch d.Caps.ActiveMTU {
	case 256, 512, 1024, 2048, 4096:
	default:
		return &Error{Field: "device.caps.active_mtu", Msg: fmt.Sprintf("%d is not an IB MTU (256, 512, 1024, 2048, 4096)", d.Caps.ActiveMTU)}
	}
	if n := d.Events.EQEntries; n < 8 || n&(n-1) != 0 {
		return &Error{Field: "device.events.eq_entries", Msg: fmt.Sprintf("%d is not a power of two of at least 8", n)}
	}
	if d.DMA.MaxReadTags > 1024 {
		return &Error{Field: "device.dma.max_read_tags", Msg: fmt.Sprintf("%d exceeds PCIe's 10-bit tags (1024)", d.DMA.MaxReadTags)}
	}
	if d.Caps.MaxSGE > 61 {
		return &Error{Field: "device.caps.max_sge", Msg: fmt.Sprintf("%d data segments cannot fit a 63-DS WQE", d.Caps.MaxSGE)}
	}
	if d.Caps.FirstQPN < 2 || d.Caps.FirstQPN >= 1<<24 {
		return &Error{Field: "device.caps.first_qpn", Msg: fmt.Sprintf("%#x not in 0x2..0xffffff (QPN 0 and 1 are the special QPs)", d.Caps.FirstQPN)}
	}
	if p.Wire.MTU > maxWireMTU {
		return &Error{Field: "wire.mtu", Msg: fmt.Sprintf("%d exceeds %d: the largest IP packet an IPv4 header's total length can say", p.Wire.MTU, maxWireMTU)}
	}
	if n := d.Caps.MaxMsgSize; n > 1<<31 {
		return &Error{Field: "device.caps.max_msg_size", Msg: fmt.Sprintf("%d exceeds 2147483648: InfiniBand messages are at most 2^31 bytes (the verbs ABI's max_msg_sz is 32 bits)", n)}
	}
	if need := d.Caps.ActiveMTU + 64; p.Wire.MTU < need {
		return &Error{Field: "wire.mtu", Msg: fmt.Sprintf("%d is too small for active_mtu %d plus the RoCEv2 headers (at least %d)", p.Wire.MTU, d.Caps.ActiveMTU, need)}
	}
	return nil
}

func walkNumbers(p string, v reflect.Value) *Error {
	switch v.Kind() {
	case reflect.Struct:
		for _, f := range structFields(v.Type()) {
			if !f.tag {
				continue
			}
			if err := walkNumbers(p+"."+f.name, v.FieldByIndex(f.index)); err != nil {
				return err
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n := v.Int(); n < 0 || n == 0 && mayBeZero[p] == "" {
			return &Error{Field: p, Msg: fmt.Sprintf("%d: must be positive", n)}
		}
		if n := v.Int(); strings.HasSuffix(p, "_ps") && n > maxPS {
			return &Error{Field: p, Msg: fmt.Sprintf("%d ps exceeds %d ps (1000 s): the model sums a stage's costs in int64 picoseconds, which a larger one would wrap", n, int64(maxPS))}
		}
		if n := v.Int(); strings.HasSuffix(p, "_cycles") && n > maxCycles {
			return &Error{Field: p, Msg: fmt.Sprintf("%d cycles exceeds %d: at the slowest clock allowed that would wrap a stage's int64 picoseconds", n, int64(maxCycles))}
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.Uint() == 0 && mayBeZero[p] == "" {
			return &Error{Field: p, Msg: "0: must be positive"}
		}
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); !(f > 0) && !(f == 0 && mayBeZero[p] != "") || math.IsInf(f, 0) {
			return &Error{Field: p, Msg: fmt.Sprintf("%g: must be a positive finite number", f)}
		}
	}
	return nil
}

// citedByFile reports whether a profile file's own cite object covers
// the field at path: the field itself or a section holding it.
func citedByFile(cite map[string]any, path string) bool {
	for f := path; f != ""; {
		if _, ok := cite[f]; ok {
			return true
		}
		i := strings.LastIndexByte(f, '.')
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return false
}
