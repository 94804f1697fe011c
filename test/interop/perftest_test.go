package interop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/freeport"
)

// Stock perftest (Debian 12's 4.5-0.17) on rxe in the guest against
// `softnic perf --wire` on the host, in both roles: the out-of-band TCP
// exchange is perftest's own, the RoCEv2 traffic goes over the guest's UDP
// link. Iteration counts are small: rxe under TCG is slow, and CI's budget
// is the whole interop run.
//
// flags go to both sides as given (perftest and softnic perf take the same
// spellings): -b must be on both, -e and -o are each side's own.
var perftestRuns = []struct {
	test  string
	flags string
	sizes []int
	iters int
}{
	{"ib_write_lat", "", []int{2, 4096}, 100},
	{"ib_send_lat", "", []int{2, 4096}, 100},
	{"ib_read_lat", "", []int{2, 4096}, 100},
	{"ib_write_bw", "", []int{1024, 65536}, 200},
	{"ib_send_bw", "", []int{1024, 65536}, 200},
	// Beyond the five: the other READ test and the atomics, one size each.
	{"ib_read_bw", "", []int{65536}, 200},
	{"ib_atomic_lat", "", []int{8}, 100},
	{"ib_atomic_bw", "", []int{8}, 200},
	// Flags that change the exchange or the loops, one size each:
	// bidirectional (both sides send; the reports cross and each row is
	// the sum), completion events (each side's own), and out_reads (in the
	// keys message: the READ requester's max_rd_atomic is the responder's).
	{"ib_send_bw", "-b", []int{4096}, 100},
	{"ib_write_bw", "-b", []int{4096}, 100},
	{"ib_send_bw", "-e", []int{4096}, 100},
	{"ib_send_lat", "-e", []int{2}, 100},
	{"ib_read_bw", "-o 2", []int{65536}, 100},
	// -a sweeps 2 B to 8 MiB (perftest ignores -s then), both ways at
	// once: 23 rows, each the sum of both sides' reports, the same on
	// both.
	{"ib_write_bw", "-b -a", []int{2}, 10},
}

// perftestTimeout bounds one run (both sides).
const perftestTimeout = 120 * time.Second

func TestInteropPerftest(t *testing.T) {
	if os.Getenv("SOFTNIC_INTEROP") != "1" {
		t.Skip("set SOFTNIC_INTEROP=1 to run the Linux Soft-RoCE interop test (builds and boots a qemu guest)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	t0 := time.Now()
	img, buildLog, err := buildGuest(ctx, guestCacheDir())
	require.NoError(t, err, buildLog)
	g, err := bootGuest(img, guestOptions{img: img, neigh: true}, 90*time.Second)
	require.NoError(t, err)
	defer g.shutdown()
	t.Logf("guest up: %s", g.ready)
	// perftest's --version exits 1 after printing it.
	out, _, err := g.run(opTimeout, "ib_write_lat --version")
	require.NoError(t, err)
	require.Contains(t, out, "Version:", "the guest has no perftest: rebuild it with guest/build.sh")
	t.Logf("guest perftest: %s", strings.TrimSpace(out))

	dir := os.Getenv("SOFTNIC_INTEROP_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else {
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	bin, err := buildSoftnic(ctx, dir)
	require.NoError(t, err)
	require.True(t, softnicHas(bin, "perf"), "softnic has no perf command")

	m := &matrix{}
	defer func() { t.Log("stock perftest × softnic perf matrix:\n" + m.String()) }()
	for _, r := range perftestRuns {
		for _, role := range []string{"server", "client"} {
			dirLabel := "rxe server, softnic client"
			if role == "client" {
				dirLabel = "softnic server, rxe client"
			}
			for _, size := range r.sizes {
				name := r.test
				if r.flags != "" {
					name += strings.ReplaceAll(" "+r.flags, " ", "_")
				}
				t.Run(fmt.Sprintf("%s/guest_%s/%d", name, role, size), func(t *testing.T) {
					before := parseCounters(g.counters())
					figs, diag, err := runPerftest(g, bin, dir, r.test, r.flags, role, size, r.iters)
					after := parseCounters(g.counters())
					note := figs
					if u := after.unusual(before); u != "" {
						note += "  rxe0: " + u
					}
					m.add(strings.TrimSpace(r.test+" "+r.flags), dirLabel, int64(size), err, note)
					if err != nil {
						t.Fatalf("%v\n%s\nrxe0 counters changed:\n%s", err, diag, after.delta(before))
					}
				})
			}
		}
	}
	t.Logf("whole perftest interop run: %v", time.Since(t0).Round(time.Millisecond))
}

// perftestCmd is the guest's perftest command line: rxe0, the RoCEv2 IPv4
// GID, -F (no CPU frequency in the guest), under timeout so that a stuck
// perftest does not hold the guest's console.
func perftestCmd(test, flags string, size, iters, port int, host string) string {
	s := fmt.Sprintf("timeout %d %s -d rxe0 -x 1 -F -s %d -n %d -p %d", int(perftestTimeout.Seconds())-20, test, size, iters, port)
	if flags != "" {
		s += " " + flags
	}
	if host != "" {
		s += " " + host
	}
	// The guest's init runs every command with stderr joined to stdout
	// (guest/init). perftest's stdout is then block-buffered and its stderr
	// is not, so a warning (get_cpu_mhz's "Correlation coefficient r^2:
	// 0.83 < 0.9" when the guest's clock sampling is noisy) could land
	// inside a table row. Its stderr goes after the table instead; the port
	// keeps two perftests in the guest from sharing the file.
	errf := fmt.Sprintf("/tmp/perftest-%d.err", port)
	return fmt.Sprintf("%s 2>%s; rc=$?; cat %s; rm -f %s; exit $rc", s, errf, errf, errf)
}

func softnicPerfArgs(g *guest, pcap, test, flags string, size, iters, port int, host string) []string {
	args := append([]string{"perf", test}, wireArgs(g, pcap)...)
	args = append(args, "-x", "1", "-s", fmt.Sprint(size), "-n", fmt.Sprint(iters), "-p", fmt.Sprint(port),
		"--timeout", "30s", "--no-progress")
	args = append(args, strings.Fields(flags)...)
	if host != "" {
		args = append(args, host)
	}
	return args
}

// perfRows returns the data rows of a perftest-shaped table (the lines
// after the " #bytes" heading that start with a number).
func perfRows(out string) [][]string {
	var rows [][]string
	in := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case strings.HasPrefix(strings.TrimSpace(l), "#bytes"):
			in = true
		case in && len(f) >= 5 && f[0] != "" && f[0][0] >= '0' && f[0][0] <= '9':
			rows = append(rows, f)
		}
	}
	return rows
}

// checkTable wants one row of size and iters from who's output; it
// returns the row's headline figure (t_typical, or BW average).
func checkTable(who, out string, size, iters int, lat bool) (string, error) {
	return checkRows(who, out, []int{size}, iters, lat)
}

// allSizes are the rows of perftest's -a: 2 B to 8 MiB.
func allSizes() []int {
	var s []int
	for n := 2; n <= 1<<23; n *= 2 {
		s = append(s, n)
	}
	return s
}

// checkRows wants one row of each of sizes, in order, with iters from
// who's output; it returns the last row's headline figure.
func checkRows(who, out string, sizes []int, iters int, lat bool) (string, error) {
	rows := perfRows(out)
	if len(rows) != len(sizes) {
		return "", fmt.Errorf("%s printed %d table rows, want %d:\n%s", who, len(rows), len(sizes), tailLines(out, 30))
	}
	for i, r := range rows {
		if r[0] != fmt.Sprint(sizes[i]) || r[1] != fmt.Sprint(iters) {
			return "", fmt.Errorf("%s's row %q: want %d bytes, %d iterations", who, r, sizes[i], iters)
		}
	}
	r := rows[len(rows)-1]
	if lat {
		if len(r) < 9 {
			return "", fmt.Errorf("%s's latency row %q has %d columns", who, r, len(r))
		}
		return "typ " + r[4] + "us", nil
	}
	return "avg " + r[3] + "MiB/s", nil
}

// runPerftest runs one test between stock perftest in the guest (in
// guestRole) and softnic perf; figs sums up both sides' figures.
func runPerftest(g *guest, bin, dir, test, flags, guestRole string, size, iters int) (figs, diag string, err error) {
	pcap := filepath.Join(dir, fmt.Sprintf("perf-%s%s-guest-%s-%d.pcap", test, strings.ReplaceAll(flags, " ", ""), guestRole, size))
	var sn *proc
	var guestOut string
	guestCode := -1
	defer func() {
		if err == nil {
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "guest %s (exit %d):\n%s\n", test, guestCode, guestOut)
		if sn != nil {
			fmt.Fprintf(&b, "softnic perf stdout:\n%s\nstderr:\n%s\n", sn.stdout.String(), tailLines(sn.stderr.String(), 40))
		}
		text, _ := decodePcap(bin, pcap)
		fmt.Fprintf(&b, "softnic decode %s:\n%s\n", filepath.Base(pcap), tailLines(text, 40))
		diag = b.String()
	}()
	lat := strings.HasSuffix(test, "_lat")
	switch guestRole {
	case "server":
		job, err := g.bg(perftestCmd(test, flags, size, iters, guestTCPPort, ""))
		if err != nil {
			return "", "", err
		}
		if !g.listening(guestTCPPort, opTimeout) {
			guestOut, guestCode, _ = g.wait(job, opTimeout)
			return "", "", fmt.Errorf("guest %s never listened on :%d", test, guestTCPPort)
		}
		for attempt := 1; ; attempt++ {
			if sn, err = startProc(bin, softnicPerfArgs(g, pcap, test, flags, size, iters, g.hostFwd, "127.0.0.1"), nil, nil); err != nil {
				return "", "", err
			}
			snErr := sn.wait(perftestTimeout)
			if snErr == nil {
				break
			}
			// slirp may accept a connection the guest never sees: the
			// guest server is then still waiting; try again.
			select {
			case <-job.done:
			default:
				if attempt < 3 && strings.Contains(sn.stderr.String(), "exchange 1 ") {
					time.Sleep(500 * time.Millisecond)
					continue
				}
			}
			guestOut, guestCode, _ = g.wait(job, opTimeout)
			return "", "", fmt.Errorf("softnic perf (client): %w: %s", snErr, firstLine(lastLineWith(sn.stderr.String(), "softnic perf:")))
		}
		if guestOut, guestCode, err = g.wait(job, perftestTimeout); err != nil {
			return "", "", err
		}
	case "client":
		port, err := freeport.TCP()
		if err != nil {
			return "", "", err
		}
		if sn, err = startProc(bin, softnicPerfArgs(g, pcap, test, flags, size, iters, port, ""), nil, nil); err != nil {
			return "", "", err
		}
		defer func() { _ = sn.wait(opTimeout) }()
		for deadline := time.Now().Add(opTimeout); !tcpListening(port); {
			select {
			case <-sn.done:
				return "", "", fmt.Errorf("softnic perf (server) exited before listening: %v: %s", sn.err, sn.stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				return "", "", fmt.Errorf("softnic perf (server) never listened on :%d", port)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if guestOut, guestCode, err = g.run(perftestTimeout, perftestCmd(test, flags, size, iters, port, slirpHost)); err != nil {
			return "", "", err
		}
		if err := sn.wait(perftestTimeout); err != nil {
			return "", "", fmt.Errorf("softnic perf (server): %w: %s", err, firstLine(lastLineWith(sn.stderr.String(), "softnic perf:")))
		}
	}
	if guestCode != 0 {
		return "", "", fmt.Errorf("guest %s exited %d", test, guestCode)
	}
	// Both sides print their table, except a read_lat or atomic_lat
	// server, which perftest has measure nothing.
	var parts []string
	var errs []error
	for _, s := range []struct {
		who, out string
		server   bool
	}{{"guest " + test, guestOut, guestRole == "server"}, {"softnic perf", sn.stdout.String(), guestRole == "client"}} {
		if s.server && (test == "ib_read_lat" || test == "ib_atomic_lat") {
			continue
		}
		sizes := []int{size}
		if slices.Contains(strings.Fields(flags), "-a") {
			sizes = allSizes()
		}
		f, err := checkRows(s.who, s.out, sizes, iters, lat)
		errs = append(errs, err)
		if err == nil {
			who := "rxe"
			if strings.HasPrefix(s.who, "softnic") {
				who = "softnic"
			}
			parts = append(parts, who+" "+f)
		}
	}
	errs = append(errs, checkFlagEffects(flags, "guest "+test, guestOut), checkFlagEffects(flags, "softnic perf", sn.stdout.String()))
	// -b: each side prints its own report plus the peer's (perftest's
	// print_full_bw_report), so both rows are the same numbers.
	if slices.Contains(strings.Fields(flags), "-b") {
		if g, s := perfRows(guestOut), perfRows(sn.stdout.String()); len(g) == len(s) {
			for i := range g {
				if !slices.Equal(g[i][:5], s[i][:5]) {
					errs = append(errs, fmt.Errorf("-b: the rows differ: guest %s %q, softnic perf %q", test, g[i], s[i]))
				}
			}
		}
	}
	// The headers name the same lines, but for those that depend on the
	// side's role (checkDepthLines).
	gk, sk := headerKeys(guestOut), headerKeys(sn.stdout.String())
	errs = append(errs, checkDepthLines(test, flags, "guest "+test, guestRole == "client", gk),
		checkDepthLines(test, flags, "softnic perf", guestRole == "server", sk))
	if g, s := withoutDepth(gk), withoutDepth(sk); !slices.Equal(g, s) {
		errs = append(errs, fmt.Errorf("the headers differ:\n guest %s: %q\n softnic perf: %q", test, g, s))
	}
	if err := errors.Join(errs...); err != nil {
		return "", "", err
	}
	if text, ok := decodePcap(bin, pcap); !ok {
		return "", "", fmt.Errorf("softnic decode found bad frames:\n%s", tailLines(text, 40))
	}
	return strings.Join(parts, ", "), "", nil
}

// checkFlagEffects checks what flags show in a side's header, where
// perftest shows it: -b in the test's title; -o N as the side's
// "Outstand reads" and as the OUT of both address lines (the keys
// message carries it, and both sides were given the same N).
func checkFlagEffects(flags, who, out string) error {
	f := strings.Fields(flags)
	for i := 0; i < len(f); i++ {
		switch f[i] {
		case "-b":
			if !strings.Contains(out, "Bidirectional") {
				return fmt.Errorf("%s: -b, but its title does not say Bidirectional:\n%s", who, tailLines(out, 30))
			}
		case "-o", "--outs":
			if i+1 >= len(f) {
				return fmt.Errorf("%s: %s without a number", who, f[i])
			}
			i++
			var n int
			if _, err := fmt.Sscan(f[i], &n); err != nil {
				return fmt.Errorf("%s: %s %q: %v", who, f[i-1], f[i], err)
			}
			if want := fmt.Sprintf(" Outstand reads  : %d\n", n); !strings.Contains(out, want) {
				return fmt.Errorf("%s: -o %d, but no %q in its header:\n%s", who, n, strings.TrimSpace(want), tailLines(out, 40))
			}
			want := fmt.Sprintf(" OUT 0x%02x", n) // C's %#04x
			for _, side := range []string{"local address:", "remote address:"} {
				if l := lastLineWith(out, side); !strings.Contains(l, want) {
					return fmt.Errorf("%s: -o %d, but its %s line %q has no %q", who, n, side, l, want)
				}
			}
		}
	}
	return nil
}

// headerKeys are the lines of a perftest header, from the first rule to
// the address lines, as names: the title and other lines without a colon
// whole (the device's name made <dev>), else each "Name : value"'s name,
// two on a line where perftest prints two; softnic's own lines ("softnic
// profile", "softnic clock") left out.
func headerKeys(out string) []string {
	rule := strings.Repeat("-", 87)
	lines := strings.Split(out, "\n")
	// The rule above the title (perftest may print a rule and a warning
	// first: "Device not recognized to implement inline feature").
	start := -1
	for i := 0; i+1 < len(lines); i++ {
		if lines[i] == rule && strings.HasPrefix(lines[i+1], strings.Repeat(" ", 20)) {
			start = i
			break
		}
	}
	if start < 0 {
		return nil
	}
	var keys []string
	for _, l := range lines[start+1:] {
		if l == rule || strings.HasPrefix(l, " local address") {
			break
		}
		for _, part := range strings.Split(l, "\t\t") {
			k := strings.TrimSpace(part)
			if i := strings.Index(k, ":"); i >= 0 {
				k = strings.TrimSpace(k[:i])
			} else {
				k = strings.NewReplacer("rxe0", "<dev>", "softnic0", "<dev>").Replace(k)
			}
			if k != "" && !strings.HasPrefix(k, "softnic ") {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// checkDepthLines checks a header's role-dependent lines against
// perftest's ctx_print_test_info: "TX depth" on the client and with -b,
// "RX depth" for the send tests on the server and with -b.
func checkDepthLines(test, flags, who string, client bool, keys []string) error {
	bidir := slices.Contains(strings.Fields(flags), "-b")
	send := strings.HasPrefix(test, "ib_send_")
	for _, c := range []struct {
		key  string
		want bool
	}{{"TX depth", client || bidir}, {"RX depth", send && (!client || bidir)}} {
		if got := slices.Contains(keys, c.key); got != c.want {
			return fmt.Errorf("%s (client %v, flags %q): %q in the header %v, want %v: %q", who, client, flags, c.key, got, c.want, keys)
		}
	}
	return nil
}

// withoutDepth is keys without the role-dependent lines.
func withoutDepth(keys []string) []string {
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == "TX depth" || k == "RX depth" })
}
