package profile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/device"
	"github.com/softnic/softnic/host"
	"github.com/softnic/softnic/sim"
	"github.com/softnic/softnic/wire"
)

func TestEmbeddedProfiles(t *testing.T) {
	require.Equal(t, []string{"cx5-gen3x16", "cx6-gen4x16", "cx7-gen5x16", "pciebench-gen3x8"}, Names())
	for _, p := range All() {
		t.Run(p.Name, func(t *testing.T) {
			require.Equal(t, p.Name, p.Device.Name)
			require.NotEmpty(t, p.Description)
			// Every number cites its source.
			for _, f := range leaves("device", reflect.TypeOf(deviceFile{})) {
				_, ok := p.Citation(f)
				require.True(t, ok, "%s: field %s has no source in cite", p.Name, f)
			}
			for _, f := range leaves("wire", reflect.TypeOf(wire.Spec{})) {
				_, ok := p.Citation(f)
				require.True(t, ok, "%s: field %s has no source in cite", p.Name, f)
			}
			// No citation names a field that does not exist.
			all := map[string]bool{}
			for _, f := range append(leaves("device", reflect.TypeOf(deviceFile{})), leaves("wire", reflect.TypeOf(wire.Spec{}))...) {
				for g := f; g != ""; g = parent(g) {
					all[g] = true
				}
			}
			for k := range p.Cite {
				require.True(t, all[k], "cite key %s names no field", k)
			}
		})
	}
}

// The default profile is the Go default: traces do not change with it.
// TestHealthTickCite: the source text of device.bar.health_tick_ps states
// the value it stands beside (it said "once a second" next to 1 ms), and
// the tick is shorter than the driver's health poll, so health_counter
// moves between two polls of a live device (faults.md §2.9).
func TestHealthTickCite(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			p, err := Load(name)
			require.NoError(t, err)
			tick := p.Device.BAR.HealthTick
			require.Equal(t, sim.Duration(0), tick%sim.Millisecond, "a whole number of ms: %v", tick)
			cite := p.Cite["device.bar.health_tick_ps"]
			require.Contains(t, cite, fmt.Sprintf("every %d ms", tick/sim.Millisecond), "the cite states the value")
			require.Contains(t, cite, "faults.md §2.9")
			require.Less(t, tick, p.Device.Faults.HealthPoll, "the counter must move between polls")
		})
	}
}

func TestDefaultIsTheBuiltIn(t *testing.T) {
	p := Default()
	require.Equal(t, device.DefaultSpec(), p.Device)
	require.Equal(t, host.DefaultConfig(), p.Host(), "the default profile's host CPU is host's default")
	require.Equal(t, wire.DefaultSpec(), p.Wire)
}

func TestProfilesDiffer(t *testing.T) {
	cx6, _ := Get("cx6-gen4x16")
	cx7, _ := Get("cx7-gen5x16")
	ref, _ := Get("pciebench-gen3x8")
	require.Equal(t, 4, cx6.Device.PCIe.Gen)
	require.Equal(t, 5, cx7.Device.PCIe.Gen)
	require.Equal(t, 8, ref.Device.PCIe.Lanes)
	require.InDelta(t, 200e9, float64(cx6.Wire.Rate), 1)
	require.InDelta(t, 400e9, float64(cx7.Wire.Rate), 1)
	require.Equal(t, uint32(4129), cx7.Device.Caps.VendorPartID)
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
		return p
	}
	ok := []struct {
		name, file string
		check      func(t *testing.T, p Profile)
	}{
		{"a section at the top level", `{"pcie":{"lanes":8}}`, func(t *testing.T, p Profile) {
			require.Equal(t, 8, p.Device.PCIe.Lanes)
			require.Equal(t, "custom", p.Name, "a file is labelled by its name, not the base")
			require.Equal(t, "custom", p.Device.Name)
			require.Equal(t, DefaultName, p.Base)
		}},
		{"a named profile on a base", `{"name":"mine","base":"cx7-gen5x16","device":{"core":{"clock_hz":2e9}}}`, func(t *testing.T, p Profile) {
			require.Equal(t, "mine", p.Device.Name)
			require.Equal(t, 5, p.Device.PCIe.Gen)
			require.InDelta(t, 2e9, float64(p.Device.Core.Clock), 1)
		}},
		{"no BlueFlame", `{"bar":{"bf_reg_size":0}}`, func(t *testing.T, p Profile) {
			require.Zero(t, p.Device.BAR.BFRegSize)
			require.Zero(t, p.Host().BFRegSize, "the host's layout follows the device's")
		}},
		{"host CPU fields where they always stood", `{"bar":{"uar_non_cached":true,"wc_lines":4,"store_cost_ps":2000},"host":{"poll_cqe_ps":7000}}`, func(t *testing.T, p Profile) {
			h := p.Host()
			require.True(t, h.UARNonCached)
			require.Equal(t, 4, h.WCLines)
			require.Equal(t, 2*sim.Nanosecond, h.StoreCost)
			require.Equal(t, 7*sim.Nanosecond, h.PollCQE)
			require.Equal(t, host.DefaultConfig().WQEBuild, h.WQEBuild, "the rest from the base")
			require.Equal(t, p.Device.BAR.WCDrain, h.WCDrain)
		}},
		{"an unbounded transmit buffer", `{"device":{"core":{"tx_buffer_bytes":0}}}`, func(t *testing.T, p Profile) {
			require.Zero(t, p.Device.Core.TxBufferBytes)
		}},
		{"a one-byte transmit buffer", `{"device":{"core":{"tx_buffer_bytes":1}}}`, func(t *testing.T, p Profile) {
			require.Equal(t, 1, p.Device.Core.TxBufferBytes)
		}},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			p, err := Load(write("custom.json", c.file))
			require.NoError(t, err)
			c.check(t, p)
		})
	}
	bad := []struct{ name, file, field, msg string }{
		{"zero lanes", `{"pcie":{"lanes":0}}`, "device.pcie.lanes", "must be positive"},
		{"a lane count that does not exist", `{"pcie":{"lanes":3}}`, "device.pcie", "lanes 3"},
		{"gen 7", `{"device":{"pcie":{"gen":7}}}`, "device.pcie", "gen 7"},
		{"zero clock", `{"core":{"clock_hz":0}}`, "device.core.clock_hz", "positive"},
		{"negative cycles", `{"core":{"rx_cycles":-4}}`, "device.core.rx_cycles", "positive"},
		{"unknown top-level key", `{"pcei":{}}`, "pcei", "unknown key"},
		{"unknown nested key", `{"pcie":{"lane":16}}`, "device.pcie.lane", "unknown key"},
		{"a string for a number", `{"caps":{"max_qp":"many"}}`, "device.caps.max_qp", "must be a number"},
		{"fractional count", `{"caps":{"max_qp":1.5}}`, "device.caps.max_qp", "whole number"},
		{"a whole count written as a float", `{"caps":{"max_qp":65536.0}}`, "device.caps.max_qp", "must be written as an integer (no fraction or exponent), got 65536.0"},
		{"a whole count in exponent form", `{"caps":{"max_qp":6.5536e4}}`, "device.caps.max_qp", "must be written as an integer"},
		{"bad MTU", `{"caps":{"active_mtu":1500}}`, "device.caps.active_mtu", "not an IB MTU"},
		{"unknown base", `{"base":"cx9"}`, "base", "no embedded profile"},
		{"wire too small for the MTU", `{"wire":{"mtu":1500}}`, "wire.mtu", "too small"},
		{"zero wire rate", `{"wire":{"rate_bps":0}}`, "wire.rate_bps", "positive"},
		{"not an object", `[1,2]`, "", "not a JSON object"},
		{"null", `null`, "", "not a JSON object (null)"},
		{"null with space", " null\n", "", "not a JSON object (null)"},
		{"null device", `{"device":null}`, "device", "must be an object"},
		{"null wire", `{"wire":null}`, "wire", "must be an object"},
		{"trailing garbage", `{} {}`, "", "trailing"},
		{"bad bf_reg_size", `{"bar":{"bf_reg_size":100}}`, "device.bar", "bf_reg_size 100"},
		{"too many WC lines", `{"bar":{"wc_lines":65}}`, "device.bar", "wc lines 65 not in 1..64"},
		{"zero WC lines", `{"bar":{"wc_lines":0}}`, "device.bar.wc_lines", "must be positive"},
		{"zero store cost", `{"device":{"bar":{"store_cost_ps":0}}}`, "device.bar.store_cost_ps", "must be positive"},
		{"negative work cost", `{"host":{"wqe_build_ps":-1}}`, "device.host.wqe_build_ps", "must be positive"},
		{"unknown host key", `{"host":{"wqe_bild_ps":1}}`, "device.host.wqe_bild_ps", "unknown key"},
		// Values the model's int64 picoseconds cannot hold, and values no
		// command could run under (QA: negative stage times, a link that
		// stopped limiting bandwidth, a run that never ended).
		{"a store cost that wraps", `{"device":{"bar":{"store_cost_ps":1200000000000000000}}}`, "device.bar.store_cost_ps", "exceeds 1000000000000000 ps (1000 s)"},
		{"a host read latency that wraps", `{"device":{"pcie":{"host_read_latency_ps":3000000000000000000}}}`, "device.pcie.host_read_latency_ps", "exceeds"},
		{"cycles that wrap", `{"device":{"core":{"doorbell_cycles":4611686018427387904}}}`, "device.core.doorbell_cycles", "cycles exceeds 1000000000"},
		{"a clock below 1 MHz", `{"core":{"clock_hz":1e-6}}`, "device.core.clock_hz", "outside 1e+06"},
		{"a wire below 1 Mb/s", `{"wire":{"rate_bps":0.0001}}`, "wire.rate_bps", "outside 1e+06"},
		{"a wire above 100 Tb/s", `{"wire":{"rate_bps":1e15}}`, "wire.rate_bps", "outside"},
		{"a clock above 1 THz", `{"device":{"core":{"clock_hz":1e308}}}`, "device.core.clock_hz", "outside 1e+06..1e+12 Hz"},
		{"a BAR clock above 1 THz", `{"device":{"bar":{"core_clock_hz":2e12}}}`, "device.bar.core_clock_hz", "outside"},
		{"a wire MTU past any IP packet", `{"wire":{"mtu":1000000000000000000}}`, "wire.mtu", "exceeds 65535"},
		{"messages past 2^31", `{"device":{"caps":{"max_msg_size":9223372036854775808}}}`, "device.caps.max_msg_size", "exceeds 2147483648"},
		{"messages of no bytes", `{"device":{"caps":{"max_msg_size":0}}}`, "device.caps.max_msg_size", "must be positive"},
		{"a huge EQ", `{"device":{"events":{"eq_entries":1048576}}}`, "device.events.eq_entries", "exceeds 65536"},
		{"a negative transmit buffer", `{"device":{"core":{"tx_buffer_bytes":-1}}}`, "device.core.tx_buffer_bytes", "must be positive"},
		{"a transmit buffer whose wire time wraps", `{"device":{"core":{"tx_buffer_bytes":2147483648}}}`, "device.core.tx_buffer_bytes", "exceeds 1073741824"},
		{"endless doorbell-record re-reads", `{"device":{"core":{"rq_polls":10000000}}}`, "device.core.rq_polls", "exceeds 1024"},
		{"max_rd_atomic past a u8", `{"device":{"caps":{"max_qp_rd_atom":100000}}}`, "device.caps.max_qp_rd_atom", "exceeds 255"},
		{"max_rd_atomic below the tools' 16", `{"device":{"caps":{"max_qp_rd_atom":8}}}`, "device.caps.max_qp_rd_atom", "8 is below 16"},
		{"one SGE", `{"device":{"caps":{"max_sge":1}}}`, "device.caps.max_sge", "1 is below 4"},
		{"a tiny SQ", `{"device":{"caps":{"max_qp_wr":2}}}`, "device.caps.max_qp_wr", "2 is below 128"},
		{"a tiny CQ", `{"device":{"caps":{"max_cqe":255}}}`, "device.caps.max_cqe", "255 is below 4096"},
		{"one CQ", `{"device":{"caps":{"max_cq":1}}}`, "device.caps.max_cq", "1 is below 16"},
		// Caps no send WQE holds: reported, and refused to every QP that
		// asked them (QA: max_inline 1000 loaded, and create_qp at it failed).
		{"more SGEs than a WQE holds", `{"device":{"caps":{"max_sge":61}}}`, "device.caps.max_sge", "61 exceeds 60"},
		{"more inline than a WQE holds", `{"device":{"caps":{"max_inline":957}}}`, "device.caps.max_inline", "957 exceeds 956"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(write("bad.json", c.file))
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrProfile))
			var pe *Error
			require.True(t, errors.As(err, &pe))
			require.Equal(t, c.field, pe.Field, "%v", err)
			require.Contains(t, err.Error(), c.msg)
		})
	}
	// Load reads at most MaxFileSize bytes: /dev/zero as a profile used
	// to read until the runtime ran out of memory. Whitespace is valid
	// JSON around {}, so only the bound refuses the larger file.
	for _, c := range []struct {
		name string
		size int
		err  error
	}{
		{"a file of MaxFileSize bytes", MaxFileSize, nil},
		{"a file over MaxFileSize", MaxFileSize + 1, ErrFileTooLarge},
		{"a file of 64 MiB", 64 << 20, ErrFileTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := append(bytes.Repeat([]byte(" "), c.size-2), "{}"...)
			p, err := Load(write("big.json", string(b)))
			if c.err == nil {
				require.NoError(t, err)
				require.Equal(t, Default().Device.PCIe, p.Device.PCIe)
				return
			}
			require.ErrorIs(t, err, ErrProfile)
			require.ErrorIs(t, err, c.err)
			require.Contains(t, err.Error(), "more than 1048576 bytes")
		})
	}
	t.Run("no such profile", func(t *testing.T) {
		_, err := Load("cx9-gen6")
		require.ErrorIs(t, err, ErrProfile)
		require.Contains(t, err.Error(), "no such profile (have cx5-gen3x16")
	})
	t.Run("by name", func(t *testing.T) {
		p, err := Load("cx6-gen4x16")
		require.NoError(t, err)
		require.Equal(t, "cx6-gen4x16", p.Device.Name)
	})
}

func FuzzParse(f *testing.F) {
	for _, p := range Names() {
		b, _ := files.ReadFile("data/" + p + ".json")
		f.Add(b)
	}
	f.Add([]byte(`{"pcie":{"lanes":0}}`))
	f.Add([]byte(`{"device":{"caps":{"max_qp":-1}},"wire":{"rate_bps":1e400}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b, "fuzz.json")
		if err != nil {
			if !errors.Is(err, ErrProfile) {
				t.Fatalf("error without ErrProfile: %v", err)
			}
			return
		}
		if p.Device.PCIe.Validate() != nil || p.Device.Core.Clock <= 0 {
			t.Fatalf("accepted an invalid profile: %+v", p.Device)
		}
	})
}

func leaves(p string, t reflect.Type) []string {
	if t.Kind() == reflect.String {
		return nil // labels, not numbers
	}
	if t.Kind() != reflect.Struct {
		return []string{p}
	}
	var out []string
	for name, f := range jsonFields(t) {
		out = append(out, leaves(p+"."+name, f.Type)...)
	}
	return out
}

func parent(f string) string {
	i := strings.LastIndexByte(f, '.')
	if i < 0 {
		return ""
	}
	return f[:i]
}

// A field a profile file sets is not shown with the base's citation,
// which cites the base's value: `softnic profiles FILE` printed MPS 128
// beside "pcie-bench model defaults, MPS 256". The file's own citation,
// of the field or of a section holding it, wins; fields it leaves alone
// keep the base's.
func TestOverriddenFieldCitation(t *testing.T) {
	dir := t.TempDir()
	base := Default()
	baseMPS, _ := base.Citation("device.pcie.mps")
	baseMRRS, _ := base.Citation("device.pcie.mrrs")
	cases := []struct {
		name, json string
		field      string
		want       string // "" : "set by <file> (no citation given)"
	}{
		{"set, not cited", `{"device":{"pcie":{"mps":128}}}`, "device.pcie.mps", ""},
		{"top-level section", `{"pcie":{"mps":128}}`, "device.pcie.mps", ""},
		{"wire field", `{"wire":{"rate_bps":25e9}}`, "wire.rate_bps", ""},
		{"cited field", `{"pcie":{"mps":128},"cite":{"device.pcie.mps":"my board"}}`, "device.pcie.mps", "my board"},
		{"cited section", `{"pcie":{"mps":128},"cite":{"device.pcie":"my board's PCIe"}}`, "device.pcie.mps", "my board's PCIe"},
		{"untouched field", `{"pcie":{"mps":128}}`, "device.pcie.mrrs", baseMRRS},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("p%d.json", i))
			require.NoError(t, os.WriteFile(path, []byte(c.json), 0o644))
			p, err := Load(path)
			require.NoError(t, err)
			got, _ := p.Citation(c.field)
			want := c.want
			if want == "" {
				want = "set by " + path + " (no citation given)"
			}
			require.Equal(t, want, got)
			require.NotEqual(t, "", baseMPS)
		})
	}
}
