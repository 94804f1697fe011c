package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/softnic/softnic/pcie"
	"github.com/softnic/softnic/profile"
)

func init() {
	register("profiles", "list the device profiles and their key figures, or show one field by field", runProfiles)
}

const profilesHelp = `usage: softnic profiles [--json] [NAME|FILE]

Without an argument, lists the built-in profiles with their key figures:
the PCIe link and its usable TLP rate (pcie-bench's R_tlp), the model's
latency of one 64-byte DMA read, the port rate and the active MTU. With a
profile name or file, prints every field with its value and its source.
Every command that runs a device takes --profile NAME|FILE.

Flags:
`

func runProfiles(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("profiles", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, ok := parseCommand(fs, profilesHelp, args, stdout, stderr)
	if !ok {
		return code
	}
	switch len(pos) {
	case 0:
		return listProfiles(stdout, *asJSON)
	case 1:
		p, err := loadProfile(pos[0])
		if err != nil {
			fmt.Fprintln(stderr, "softnic profiles:", err)
			return exitCode(err)
		}
		return showProfile(stdout, p, *asJSON)
	default:
		printUsage(fs, profilesHelp, stderr)
		return 2
	}
}

// profileFigures are the key figures of one profile, computed from it.
type profileFigures struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	PCIe        string  `json:"pcie"`
	TLPGbps     float64 `json:"pcie_tlp_gbps"`
	Read64ns    float64 `json:"dma_read_64b_ns"`
	PortGbps    float64 `json:"port_gbps"`
	ActiveMTU   int     `json:"active_mtu"`
	BlueFlame   int     `json:"bf_reg_size"`
	Default     bool    `json:"default,omitempty"`
}

func figures(p profile.Profile) profileFigures {
	s := p.Device.PCIe
	done, _ := pcie.NewLink(s).DeviceRead(0, 0x10000, 64)
	return profileFigures{Name: p.Name, Description: p.Description, PCIe: fmt.Sprintf("Gen%d x%d", s.Gen, s.Lanes),
		TLPGbps: s.TLPGbps(), Read64ns: float64(done) / 1000, PortGbps: float64(p.Wire.Rate) / 1e9,
		ActiveMTU: p.Device.Caps.ActiveMTU, BlueFlame: p.Device.BAR.BFRegSize, Default: p.Name == profile.DefaultName}
}

func listProfiles(w io.Writer, asJSON bool) int {
	var fs []profileFigures
	for _, p := range profile.All() {
		fs = append(fs, figures(p))
	}
	if asJSON {
		b, _ := json.MarshalIndent(fs, "", "  ")
		fmt.Fprintln(w, string(b))
		return 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPCIE\tR_TLP\tDMA READ 64 B\tPORT\tMTU\tBF\tDESCRIPTION")
	for _, f := range fs {
		name := f.Name
		if f.Default {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f Gb/s\t%.1f ns\t%g Gb/s\t%d\t%d\t%s\n", name, f.PCIe, f.TLPGbps, f.Read64ns, f.PortGbps, f.ActiveMTU, f.BlueFlame, f.Description)
	}
	tw.Flush()
	fmt.Fprintln(w, "* the default; use --profile NAME|FILE on any command, softnic profiles NAME for every field and its source")
	return 0
}

// showProfile prints every field of p with its value and source.
func showProfile(w io.Writer, p profile.Profile, asJSON bool) int {
	type row struct {
		Field  string `json:"field"`
		Value  any    `json:"value"`
		Source string `json:"source"`
	}
	var rows []row
	p.Walk(func(path string, v any) {
		src, _ := p.Citation(path)
		rows = append(rows, row{path, v, src})
	})
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Field < rows[j].Field })
	if asJSON {
		b, _ := json.MarshalIndent(struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			Base        string `json:"base,omitempty"`
			Source      string `json:"source"`
			Fields      []row  `json:"fields"`
		}{p.Name, p.Description, p.Base, p.Source, rows}, "", "  ")
		fmt.Fprintln(w, string(b))
		return 0
	}
	fmt.Fprintf(w, "profile %s: %s\n", p.Name, p.Description)
	if p.Base != "" {
		fmt.Fprintf(w, "based on %s; from %s\n", p.Base, p.Source)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIELD\tVALUE\tSOURCE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%v\t%s\n", r.Field, r.Value, r.Source)
	}
	tw.Flush()
	return 0
}
