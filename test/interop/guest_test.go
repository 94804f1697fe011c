package interop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/softnic/softnic/internal/freeport"
)

// The guest's view of the test network. Addresses come from TEST-NET-1
// (RFC 5737): these frames only ever travel between qemu's and softnic's
// UDP sockets on 127.0.0.1.
const (
	guestIP    = "192.0.2.2"
	guestMAC   = "52:54:00:c0:00:02"
	softnicIP  = "192.0.2.1"
	softnicMAC = "02:00:c0:00:02:01"
	slirpMAC   = "52:54:00:c0:00:03"
	// guestTCPPort is where ibv_rc_pingpong listens in the guest; slirp
	// forwards a host port to it.
	guestTCPPort = 18515
	// slirpHost is the host as the guest sees it through slirp.
	slirpHost = "10.0.2.2"
)

// guestImage is the output of guest/build.sh.
type guestImage struct {
	kernelVersion, vmlinux, initrd string
}

// buildGuest runs guest/build.sh (which caches in dir) and reads guest.env.
func buildGuest(ctx context.Context, dir string) (guestImage, string, error) {
	cmd := exec.CommandContext(ctx, "bash", "guest/build.sh", dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return guestImage{}, out.String(), fmt.Errorf("guest/build.sh: %w", err)
	}
	env, err := os.ReadFile(filepath.Join(dir, "guest.env"))
	if err != nil {
		return guestImage{}, out.String(), err
	}
	var img guestImage
	for line := range strings.SplitSeq(string(env), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "KERNEL_VERSION":
			img.kernelVersion = v
		case "VMLINUX":
			img.vmlinux = v
		case "INITRD":
			img.initrd = v
		}
	}
	if img.vmlinux == "" || img.initrd == "" {
		return img, out.String(), fmt.Errorf("guest.env lacks VMLINUX or INITRD: %q", env)
	}
	return img, out.String(), nil
}

// guestCacheDir is where build.sh keeps the guest: SOFTNIC_GUEST_CACHE, else
// $XDG_CACHE_HOME/softnic-guest, else /tmp/softnic-guest (never the repo).
func guestCacheDir() string {
	if d := os.Getenv("SOFTNIC_GUEST_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "softnic-guest")
	}
	return "/tmp/softnic-guest"
}

// guestJob is one command run by the guest's console loop.
type guestJob struct {
	id   string
	out  []string
	code int
	done chan struct{}
}

// guest is a running qemu with the Soft-RoCE guest. Its serial console
// (ttyS0) carries the command loop of guest/init; ttyS1.. are raw byte
// channels (qemu unix-socket chardevs) for verbs_peer's line protocol.
type guest struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dir   string

	// UDP ports of the RoCE link: qemu binds guestUDP and sends every frame
	// to peerUDP, where softnic listens.
	guestUDP, peerUDP int
	// hostFwd is the host TCP port slirp forwards to the guest's :18515.
	hostFwd  int
	channels []string // unix socket paths of ttyS1, ttyS2, ...
	ready    string   // the READY line

	mu      sync.Mutex
	console bytes.Buffer // everything the console printed
	stderr  bytes.Buffer // qemu's own messages
	jobs    map[string]*guestJob
	fg      *guestJob // the job whose unprefixed lines are being collected
	seq     int
	exited  chan struct{}
	readyCh chan string
}

type guestOptions struct {
	img      guestImage
	channels int  // extra serial channels
	neigh    bool // permanent neighbour entry for softnic's IP
}

// bootGuest starts qemu under TCG as rxe-peer.md prescribes and waits for
// the READY line.
func bootGuest(img guestImage, o guestOptions, timeout time.Duration) (*guest, error) {
	dir, err := os.MkdirTemp("", "sn-guest")
	if err != nil {
		return nil, err
	}
	g := &guest{dir: dir, jobs: map[string]*guestJob{}, exited: make(chan struct{}), readyCh: make(chan string, 1)}
	if g.guestUDP, err = freeport.UDP(); err != nil {
		return nil, err
	}
	if g.peerUDP, err = freeport.UDP(); err != nil {
		return nil, err
	}
	if g.hostFwd, err = freeport.TCP(); err != nil {
		return nil, err
	}
	appendArgs := []string{"console=ttyS0", "quiet", "panic=-1",
		"sn_mac=" + guestMAC, "sn_ip=" + guestIP + "/24", "sn_umac=" + slirpMAC}
	if o.neigh {
		appendArgs = append(appendArgs, "sn_neigh="+softnicIP+"@"+softnicMAC)
	}
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", "max", "-m", "1024", "-smp", "2",
		"-display", "none", "-nodefaults", "-no-reboot",
		"-kernel", img.vmlinux, "-initrd", img.initrd,
		"-append", strings.Join(appendArgs, " "),
		"-serial", "stdio",
	}
	for i := 1; i <= o.channels; i++ {
		p := filepath.Join(dir, fmt.Sprintf("c%d.sock", i))
		g.channels = append(g.channels, p)
		args = append(args, "-chardev", fmt.Sprintf("socket,id=c%d,path=%s,server=on,wait=off", i, p),
			"-serial", fmt.Sprintf("chardev:c%d", i))
	}
	args = append(args,
		"-netdev", fmt.Sprintf("socket,id=n0,udp=127.0.0.1:%d,localaddr=127.0.0.1:%d", g.peerUDP, g.guestUDP),
		"-device", "virtio-net-pci,netdev=n0,mac="+guestMAC,
		"-netdev", fmt.Sprintf("user,id=n1,hostfwd=tcp:127.0.0.1:%d-10.0.2.15:%d", g.hostFwd, guestTCPPort),
		"-device", "virtio-net-pci,netdev=n1,mac="+slirpMAC,
	)
	g.cmd = exec.Command("qemu-system-x86_64", args...)
	// If the test binary dies (panic, timeout), qemu must not outlive it.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	g.cmd.Stderr = &lockedWriter{mu: &g.mu, w: &g.stderr}
	if g.stdin, err = g.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu-system-x86_64: %w", err)
	}
	go g.readConsole(stdout)
	go func() { _ = g.cmd.Wait(); close(g.exited) }()
	select {
	case line := <-g.readyCh:
		if strings.HasPrefix(line, "SOFTNIC-GUEST-FAILED") {
			g.kill()
			return nil, fmt.Errorf("guest init failed: %s\nconsole:\n%s", line, g.consoleText())
		}
		g.ready = line
	case <-g.exited:
		return nil, fmt.Errorf("qemu exited during boot: %s\nconsole:\n%s", g.stderrText(), g.consoleText())
	case <-time.After(timeout):
		g.kill()
		return nil, fmt.Errorf("guest not ready after %v\nconsole:\n%s", timeout, g.consoleText())
	}
	return g, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// readConsole splits the console into lines and routes them: "@@OUT ID"
// lines to background job ID, "@@EXIT ID CODE" ends job ID, other lines
// belong to the foreground job.
func (g *guest) readConsole(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		g.mu.Lock()
		g.console.WriteString(line + "\n")
		switch {
		case strings.HasPrefix(line, "SOFTNIC-GUEST-"):
			select {
			case g.readyCh <- line:
			default:
			}
		case strings.HasPrefix(line, "@@OUT "):
			id, text, _ := strings.Cut(strings.TrimPrefix(line, "@@OUT "), " ")
			if j := g.jobs[id]; j != nil {
				j.out = append(j.out, text)
			}
		case strings.HasPrefix(line, "@@EXIT "):
			f := strings.Fields(line)
			if len(f) == 3 {
				if j := g.jobs[f[1]]; j != nil {
					j.code, _ = strconv.Atoi(f[2])
					delete(g.jobs, f[1])
					if g.fg == j {
						g.fg = nil
					}
					close(j.done)
				}
			}
		default:
			if g.fg != nil {
				g.fg.out = append(g.fg.out, line)
			}
		}
		g.mu.Unlock()
	}
}

func (g *guest) consoleText() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.console.String()
}

func (g *guest) stderrText() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stderr.String()
}

// start sends one command to the console loop: "run" (foreground) or "bg".
func (g *guest) start(verb, shell string) (*guestJob, error) {
	if strings.ContainsAny(shell, "\n\r") {
		return nil, errors.New("guest command must be one line")
	}
	g.mu.Lock()
	g.seq++
	j := &guestJob{id: strconv.Itoa(g.seq), done: make(chan struct{})}
	g.jobs[j.id] = j
	if verb == "run" {
		g.fg = j
	}
	g.mu.Unlock()
	if _, err := fmt.Fprintf(g.stdin, "%s %s %s\n", verb, j.id, shell); err != nil {
		return nil, err
	}
	return j, nil
}

// wait waits for a job and returns its output lines and exit status.
func (g *guest) wait(j *guestJob, timeout time.Duration) (string, int, error) {
	select {
	case <-j.done:
	case <-g.exited:
		return "", -1, errors.New("qemu exited")
	case <-time.After(timeout):
		g.mu.Lock()
		out := strings.Join(j.out, "\n")
		g.mu.Unlock()
		return out, -1, fmt.Errorf("guest command %s timed out after %v", j.id, timeout)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(j.out, "\n"), j.code, nil
}

// run runs a shell command in the guest and waits for it. Commands run one
// at a time: the console loop reads the next line only when one is done.
func (g *guest) run(timeout time.Duration, shell string) (string, int, error) {
	j, err := g.start("run", shell)
	if err != nil {
		return "", -1, err
	}
	return g.wait(j, timeout)
}

// mustRun is run for commands that must succeed.
func (g *guest) mustRun(timeout time.Duration, shell string) (string, error) {
	out, code, err := g.run(timeout, shell)
	if err == nil && code != 0 {
		err = fmt.Errorf("guest: %q exited %d: %s", shell, code, out)
	}
	return out, err
}

// listening waits, for at most timeout, until a guest program listens on
// TCP port (through slirp a connect succeeds even before it does).
func (g *guest) listening(port int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, code, _ := g.run(opTimeout, fmt.Sprintf("netstat -ltn | grep -q ':%d '", port)); code == 0 {
			return true
		}
	}
	return false
}

// bg starts a shell command in the background in the guest; its output
// arrives when it ends.
func (g *guest) bg(shell string) (*guestJob, error) { return g.start("bg", shell) }

// openChannel connects to serial channel i (1 = ttyS1).
func (g *guest) openChannel(i int) (net.Conn, error) {
	if i < 1 || i > len(g.channels) {
		return nil, fmt.Errorf("no serial channel %d", i)
	}
	return net.Dial("unix", g.channels[i-1])
}

// counters returns rxe0's hw_counters as "name value" lines.
func (g *guest) counters() string {
	out, _, err := g.run(10*time.Second, "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . * | tr : ' '")
	if err != nil {
		return "(hw_counters unavailable: " + err.Error() + ")"
	}
	return out
}

func (g *guest) kill() {
	if g.cmd.Process != nil {
		_ = g.cmd.Process.Kill()
	}
}

// shutdown powers the guest off (or kills qemu) and removes its sockets.
func (g *guest) shutdown() {
	_, _ = fmt.Fprintln(g.stdin, "poweroff")
	select {
	case <-g.exited:
	case <-time.After(10 * time.Second):
		g.kill()
		<-g.exited
	}
	_ = os.RemoveAll(g.dir)
}
