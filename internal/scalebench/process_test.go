//go:build scale

package scalebench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
)

// The binaries are built once per run, into binDir, removed by TestMain.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary returns the path of the lanes or nats-server binary, building
// both on first use (the module pins nats-server: no network needed).
func binary(b *testing.B, name string) string {
	b.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "lanes-scalebench-"); buildErr != nil {
			return
		}
		for bin, pkg := range map[string]string{"lanes": "github.com/lanes-dev/lanes", "nats-server": "github.com/nats-io/nats-server/v2"} {
			if out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, bin), pkg).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// proc is a child process whose stdout and stderr go to a file. It is
// stopped when the benchmark ends, and its last lines are logged if the
// benchmark failed.
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	started time.Time
	exited  chan struct{}
	once    sync.Once
}

func startProc(b *testing.B, name, bin string, args ...string) *proc {
	b.Helper()
	p := &proc{name: name, log: filepath.Join(b.TempDir(), name+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close() // the child holds its own descriptor
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	b.Cleanup(func() {
		p.stop()
		if b.Failed() {
			b.Logf("last lines of %s (%s):\n%s", name, p.log, p.tail(50))
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop asks the process to end (SIGTERM: nats-server flushes its store,
// lanes work hands its lanes over) and kills it after a minute.
func (p *proc) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

// tail is the last n lines of the process's output.
func (p *proc) tail(n int) string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	return tail(string(data), n)
}

// server is a nats-server process with JetStream, on 127.0.0.1.
type server struct {
	*proc
	url string
}

// startServer starts a nats-server with a fresh store on a free port and
// waits until JetStream answers. It needs no limit raised for 16,384
// lanes: a stream's own max_consumers (the design's, max(1000, 2N)) takes
// precedence over the server's default of 1,000, and an account with no
// configured limits has no consumer limit.
func startServer(b *testing.B) *server {
	b.Helper()
	port := freePort(b)
	s := &server{url: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	s.proc = startProc(b, "nats-server", binary(b, "nats-server"),
		"-js", "-sd", filepath.Join(b.TempDir(), "store"), "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := jetStreamAnswers(s.url)
		if err == nil {
			return s
		}
		if !s.running() || time.Now().After(deadline) {
			b.Fatalf("nats-server not ready on %s: %v", s.url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func jetStreamAnswers(url string) error {
	nc, js, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

func connect(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// freePort is a TCP port nothing listens on (the kernel's pick, released).
func freePort(b *testing.B) int {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// run runs the lanes CLI to its end and returns its stdout, exit code and
// wall time. A failure to start fails the benchmark; a non-zero exit is
// the caller's to judge.
func run(b *testing.B, args ...string) (stdout []byte, code int, took time.Duration) {
	b.Helper()
	cmd := exec.Command(binary(b, "lanes"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	if err != nil && cmd.ProcessState == nil {
		b.Fatalf("lanes %s: %v", strings.Join(args, " "), err)
	}
	if code = cmd.ProcessState.ExitCode(); code != 0 {
		b.Logf("lanes %s: exit %d\n%s", args[0], code, tail(errOut.String(), 20))
	}
	return out.Bytes(), code, took
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// cpu is a process's CPU time so far (user + system, every thread; pid 0
// is this process), at the kernel's 10 ms resolution.
func cpu(b *testing.B, pid int) time.Duration {
	b.Helper()
	d, err := natstest.ProcessCPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// coreShare is each process's CPU over window, in % of one core. The
// window is a measurement, not a wait for a condition: it sleeps.
func coreShare(b *testing.B, window time.Duration, pids ...int) []float64 {
	b.Helper()
	before := make([]time.Duration, len(pids))
	for i, pid := range pids {
		before[i] = cpu(b, pid)
	}
	start := time.Now()
	time.Sleep(window)
	elapsed := time.Since(start)
	shares := make([]float64, len(pids))
	for i, pid := range pids {
		shares[i] = 100 * (cpu(b, pid) - before[i]).Seconds() / elapsed.Seconds()
	}
	return shares
}
