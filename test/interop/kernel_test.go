package interop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// guestBin is a statically linked program to put into the guest.
type guestBin struct {
	host  string // path on the host
	guest string // path in the guest (/usr/bin/...)
}

// buildStatic builds pkg's test binary (test: true) or command statically
// (CGO_ENABLED=0), so that it runs in the guest's busybox initramfs.
func buildStatic(ctx context.Context, dir, pkg, name string, test bool) (string, error) {
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out, pkg}
	if test {
		args = []string{"test", "-c", "-o", out, pkg}
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return out, nil
}

// withFiles returns an image whose initramfs is img's followed by a second
// newc archive holding bins: the kernel unpacks concatenated archives in
// order, so the guest build (Debian packages only, cached by build.sh)
// stays as it is and the test's own binaries ride along.
func withFiles(img guestImage, dir string, bins []guestBin) (guestImage, error) {
	root := filepath.Join(dir, "extra-root")
	var names []string
	for _, b := range bins {
		dst := filepath.Join(root, b.guest)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return img, err
		}
		data, err := os.ReadFile(b.host)
		if err != nil {
			return img, err
		}
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			return img, err
		}
		names = append(names, strings.TrimPrefix(b.guest, "/"))
	}
	cmd := exec.Command("cpio", "-o", "-H", "newc", "--quiet")
	cmd.Dir = root
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
	extra, err := cmd.Output()
	if err != nil {
		return img, fmt.Errorf("cpio: %w", err)
	}
	base, err := os.ReadFile(img.initrd)
	if err != nil {
		return img, err
	}
	// newc members are 4-byte aligned; the next archive starts after the
	// previous one's trailer, padded to 512 bytes as cpio pads it.
	joined := append(base, make([]byte, (512-len(base)%512)%512)...)
	joined = append(joined, extra...)
	img.initrd = filepath.Join(dir, "initrd-extra.cpio")
	return img, os.WriteFile(img.initrd, joined, 0o644)
}

// portableExamples is how many of the provider's Examples run on a
// kernel device (provider/example_world_test.go: newWorld).
const portableExamples = 13

// TestKernelBackend boots the guest with the provider's conformance suite
// (test/conformance, statically linked) and runs it there on both
// backends: the emulated NIC and the kernel's rxe0 through
// /dev/infiniband/uverbs0. It logs the table test × backend.
func TestKernelBackend(t *testing.T) {
	if os.Getenv("SOFTNIC_INTEROP") != "1" {
		t.Skip("set SOFTNIC_INTEROP=1 to run the provider's kernel backend in the Soft-RoCE guest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	img, buildLog, err := buildGuest(ctx, guestCacheDir())
	require.NoError(t, err, buildLog)
	dir := t.TempDir()
	conf, err := buildStatic(ctx, dir, "github.com/softnic/softnic/test/conformance", "conformance.test", true)
	require.NoError(t, err)
	sn, err := buildStatic(ctx, dir, "github.com/softnic/softnic/cmd/softnic", "softnic", false)
	require.NoError(t, err)
	// The provider's own test binary: its Examples, on rxe0 this time.
	ptest, err := buildStatic(ctx, dir, "github.com/softnic/softnic/provider", "provider.test", true)
	require.NoError(t, err)
	img, err = withFiles(img, dir, []guestBin{{conf, "/usr/bin/conformance.test"}, {sn, "/usr/bin/softnic"}, {ptest, "/usr/bin/provider.test"}})
	require.NoError(t, err)
	t1 := time.Now()
	g, err := bootGuest(img, guestOptions{img: img, neigh: true}, 120*time.Second)
	require.NoError(t, err)
	defer g.shutdown()
	t.Logf("guest up in %v: %s", time.Since(t1).Round(time.Millisecond), g.ready)

	// SOFTNIC_GUEST_RUN replaces the suite by a shell command (debugging:
	// dmesg, dynamic debug, softnic devinfo -v -d rxe0).
	if dbg := os.Getenv("SOFTNIC_GUEST_RUN"); dbg != "" {
		o, _, _ := g.run(2*time.Minute, dbg)
		t.Log(o)
		return
	}
	out, code, err := g.run(10*time.Minute, "SOFTNIC_KDEV=rxe0 SOFTNIC_KDEV_DISRUPT=1 /usr/bin/conformance.test -test.v -test.count=1 -test.timeout=9m")
	require.NoError(t, err)
	table := conformanceTable(out)
	t.Logf("conformance (guest, kernel %s):\n%s", img.kernelVersion, table)
	require.Zero(t, code, "conformance suite in the guest:\n%s", out)
	require.Contains(t, table, "kernel-rxe0", "the kernel backend ran:\n%s", out)

	t.Run("examples", func(t *testing.T) {
		// The provider's Examples with SOFTNIC_EXAMPLE_DEVICE=rxe0: the
		// portable ones open two contexts on rxe0 and print exactly what
		// they print on the emulator (each says so on stderr); the others
		// show mlx5 bytes or emulator-only faults and run on the emulator.
		out, code, err := g.run(5*time.Minute, "SOFTNIC_EXAMPLE_DEVICE=rxe0 /usr/bin/provider.test -test.run '^Example' -test.v -test.count=1 2>&1")
		require.NoError(t, err)
		require.Zero(t, code, "the provider's Examples on rxe0:\n%s", out)
		var ran []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "--- PASS: Example") {
				ran = append(ran, strings.Fields(l)[2])
			}
		}
		onRXE := strings.Count(out, "example: on rxe0")
		t.Logf("%d Examples passed in the guest, %d of them on rxe0: %s", len(ran), onRXE, strings.Join(ran, " "))
		require.GreaterOrEqual(t, onRXE, portableExamples, out)
	})

	t.Run("post_send_cost", func(t *testing.T) {
		// The slow path and the fast path side by side, in the same guest:
		// one post_send with its doorbell on rxe (a write() system call)
		// and on the emulated mlx5 NIC (MMIO stores into the model).
		out, code, err := g.run(5*time.Minute, "SOFTNIC_KDEV=rxe0 /usr/bin/conformance.test -test.run XXX -test.bench PostSend -test.benchtime 5000x -test.count 3")
		require.NoError(t, err)
		require.Zero(t, code, out)
		var lines []string
		for line := range strings.SplitSeq(out, "\n") {
			if strings.HasPrefix(line, "BenchmarkPostSend/") {
				lines = append(lines, line)
			}
		}
		require.NotEmpty(t, lines, out)
		t.Logf("post_send + doorbell in the guest (TCG):\n%s", strings.Join(lines, "\n"))
	})

	t.Run("rc_pingpong", func(t *testing.T) {
		// The Go provider on a real kernel driver (softnic rc_pingpong -d
		// rxe0 in the guest) against the Go device model (softnic
		// rc_pingpong on an emulated NIC on the host), over the udp wire,
		// in both roles.
		bin := sn // the guest's static build runs on the host too
		m := &figures{}
		defer func() { t.Log("softnic -d rxe0 (guest) × softnic emulated (host):\n" + m.String()) }()
		guestCmd := func(size uint64, port int, host string) string {
			s := fmt.Sprintf("softnic rc_pingpong -d rxe0 -i 1 -g 1 -m %d -s %d -n %d -p %d", pathMTU, size, pingpongIters, port)
			if host != "" {
				s += " " + host
			}
			return s
		}
		for _, role := range []string{"server", "client"} {
			label := "softnic -d rxe0 server, softnic emulated client"
			if role == "client" {
				label = "softnic emulated server, softnic -d rxe0 client"
			}
			for _, n := range pingpongSizes {
				t.Run(fmt.Sprintf("guest_%s/%d", role, n), func(t *testing.T) {
					diag, err := runPingpongWith(g, bin, dir, role, n, "softnic rc_pingpong -d rxe0", guestCmd)
					m.add("rc_pingpong", label, int64(n), err, diag) // the guest's summary line
					require.NoError(t, err, diag)
				})
			}
			// -e: the guest side sleeps on CQ events (the kernel's
			// completion channel fd) instead of polling.
			t.Run(fmt.Sprintf("guest_%s_events/1024", role), func(t *testing.T) {
				evCmd := func(size uint64, port int, host string) string { return guestCmd(size, port, host) + " -e" }
				diag, err := runPingpongWith(g, bin, dir, role, 1024, "softnic rc_pingpong -d rxe0 -e", evCmd)
				m.add("rc_pingpong -e", label, 1024, err, diag)
				require.NoError(t, err, diag)
			})
		}
	})

	t.Run("perf", func(t *testing.T) {
		// softnic perf -d rxe0 (the Go provider on the kernel driver) as the
		// server of stock perftest on the same rxe0, in the guest.
		m := &figures{}
		defer func() { t.Log("softnic perf -d rxe0 × stock perftest, both in the guest:\n" + m.String()) }()
		for _, r := range []struct {
			test  string
			flags string // both sides
			size  int
			iters int
		}{{"ib_write_lat", "", 2, 200}, {"ib_send_lat", "", 2, 200}, {"ib_read_lat", "", 2, 200}, {"ib_atomic_lat", "", 8, 200},
			{"ib_write_bw", "", 65536, 200}, {"ib_send_bw", "", 65536, 200},
			// The flags of perftest_test.go's rows, on the kernel's
			// completion channel (-e) and rxe's out_reads (-o).
			{"ib_send_bw", "-b", 4096, 100}, {"ib_write_bw", "-b", 4096, 100},
			{"ib_send_bw", "-e", 4096, 100}, {"ib_send_lat", "-e", 2, 100}, {"ib_read_bw", "-o 2", 65536, 100}} {
			name := r.test + strings.ReplaceAll(strings.TrimRight(" "+r.flags, " "), " ", "_")
			t.Run(fmt.Sprintf("%s/%d", name, r.size), func(t *testing.T) {
				port := 18600
				job, err := g.bg(fmt.Sprintf("softnic perf %s -d rxe0 -x 1 -s %d -n %d -p %d --timeout 30s --no-progress %s", r.test, r.size, r.iters, port, r.flags))
				require.NoError(t, err)
				require.True(t, g.listening(port, opTimeout), "softnic perf -d rxe0 never listened")
				theirs, code, err := g.run(perftestTimeout, perftestCmd(r.test, r.flags, r.size, r.iters, port, "127.0.0.1"))
				require.NoError(t, err)
				ours, ourCode, err := g.wait(job, perftestTimeout)
				require.NoError(t, err)
				lat := strings.HasSuffix(r.test, "_lat")
				// A read_lat or atomic_lat server measures nothing (perftest).
				fo, e1 := "(server: no table)", error(nil)
				if r.test != "ib_read_lat" && r.test != "ib_atomic_lat" {
					fo, e1 = checkTable("softnic perf -d rxe0", ours, r.size, r.iters, lat)
				}
				ft, e2 := checkTable(r.test, theirs, r.size, r.iters, lat)
				err = errors.Join(e1, e2, checkFlagEffects(r.flags, "softnic perf -d rxe0", ours), checkFlagEffects(r.flags, r.test, theirs))
				if code != 0 || ourCode != 0 {
					err = errors.Join(err, fmt.Errorf("exit codes: perftest %d, softnic %d", code, ourCode))
				}
				m.add(strings.TrimSpace(r.test+" "+r.flags), "softnic -d rxe0 server, perftest client", int64(r.size), err, "softnic "+fo+", perftest "+ft)
				require.NoError(t, err, "softnic:\n%s\nperftest:\n%s", ours, theirs)
			})
		}
	})

	t.Run("devinfo", func(t *testing.T) {
		// softnic devinfo reads the kernel's answers: the same values as
		// rdma-core's ibv_devinfo on the same device.
		ours, code, err := g.run(time.Minute, "softnic devinfo -v -d rxe0")
		require.NoError(t, err)
		require.Zero(t, code, ours)
		theirs, code, err := g.run(time.Minute, "ibv_devinfo -v -d rxe0")
		require.NoError(t, err)
		require.Zero(t, code, theirs)
		o, th := devinfoFields(ours), devinfoFields(theirs)
		for _, k := range []string{"hca_id", "fw_ver", "node_guid", "vendor_id", "max_mr_size", "max_qp", "max_qp_wr", "max_sge",
			"max_cq", "max_cqe", "max_mr", "max_pd", "max_qp_rd_atom", "state", "max_mtu", "active_mtu", "link_layer", "max_msg_sz",
			"GID[  0]", "GID[  1]"} {
			require.NotEmpty(t, th[k], "ibv_devinfo has no %s:\n%s", k, theirs)
			want, got := th[k], o[k]
			if strings.HasPrefix(k, "GID") {
				// softnic prints GIDs expanded (its emulated devices' shape),
				// rdma-core 44 compressed: compare the addresses.
				want, got = canonGID(want), canonGID(got)
			}
			require.Equal(t, want, got, "%s: softnic devinfo vs ibv_devinfo\n%s\n%s", k, ours, theirs)
		}
	})

	t.Run("device_removal", func(t *testing.T) {
		// Last: deletes rxe0 under an open context and adds it back.
		out, code, err := g.run(3*time.Minute, "SOFTNIC_KDEV=rxe0 SOFTNIC_KDEV_REMOVE=1 /usr/bin/conformance.test -test.run TestDeviceRemoval -test.v -test.count=1")
		require.NoError(t, err)
		require.Zero(t, code, out)
		require.Contains(t, out, "--- PASS: TestDeviceRemoval", out)
		t.Log(tailLines(out, 12))
	})
}

// canonGID rewrites "ADDR, TYPE" with the address in one spelling.
func canonGID(s string) string {
	a, typ, _ := strings.Cut(s, ",")
	if ip, err := netip.ParseAddr(strings.TrimSpace(a)); err == nil {
		a = ip.String()
	}
	return a + "," + typ
}

// devinfoFields is the "key: value" lines of ibv_devinfo's output (the
// first of each key: the device, then port 1).
func devinfoFields(out string) map[string]string {
	m := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if _, seen := m[k]; !seen {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

var resultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (Test[^/ ]+)/([^/ ]+)(/\S+)? \(`)

// conformanceTable turns go test -v output into test × backend results.
func conformanceTable(out string) string {
	res := map[string]map[string]string{}
	backends := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		m := resultLine.FindStringSubmatch(line)
		if m == nil || m[4] != "" {
			continue
		}
		if res[m[2]] == nil {
			res[m[2]] = map[string]string{}
		}
		res[m[2]][m[3]] = strings.ToLower(m[1])
		backends[m[3]] = true
	}
	var tests, bs []string
	for k := range res {
		tests = append(tests, k)
	}
	for k := range backends {
		bs = append(bs, k)
	}
	sort.Strings(tests)
	sort.Strings(bs)
	var b strings.Builder
	fmt.Fprintf(&b, "| test | %s |\n|---|%s\n", strings.Join(bs, " | "), strings.Repeat("---|", len(bs)))
	for _, tn := range tests {
		row := []string{}
		for _, be := range bs {
			r := res[tn][be]
			if r == "" {
				r = "-"
			}
			row = append(row, r)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", tn, strings.Join(row, " | "))
	}
	return b.String()
}

func TestConformanceTable(t *testing.T) {
	out := "=== RUN   TestPD\n--- PASS: TestPD (0.00s)\n    --- PASS: TestPD/emulated (0.00s)\n    --- FAIL: TestPD/kernel-rxe0 (0.01s)\n" +
		"        --- PASS: TestPD/kernel-rxe0/sub (0.00s)\n    --- SKIP: TestCQ/kernel-rxe0 (0.00s)\n"
	require.Equal(t, "| test | emulated | kernel-rxe0 |\n|---|---|---|\n| TestCQ | - | skip |\n| TestPD | pass | fail |\n", conformanceTable(out))
}

// figures is a run's table: operation, direction, size, result and the
// figures the programs printed.
type figures struct{ rows [][5]string }

func (f *figures) add(op, dir string, size int64, err error, figs string) {
	res := "ok"
	if err != nil {
		res = "FAIL"
	}
	f.rows = append(f.rows, [5]string{op, dir, fmt.Sprint(size), res, figs})
}

func (f *figures) String() string {
	var b strings.Builder
	w := [5]int{}
	all := append([][5]string{{"operation", "direction", "size", "result", "figures"}}, f.rows...)
	for _, r := range all {
		for i, c := range r {
			w[i] = max(w[i], len(c))
		}
	}
	for _, r := range all {
		fmt.Fprintf(&b, "%-*s  %-*s  %*s  %-*s  %s\n", w[0], r[0], w[1], r[1], w[2], r[2], w[3], r[3], r[4])
	}
	return b.String()
}
