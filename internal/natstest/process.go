package natstest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/embedded"
)

// serverDirEnv, set in the environment of a re-executed test binary, makes
// ServeIfChild run a server storing there instead of the tests.
const serverDirEnv = "LANES_TEST_SERVER_PROCESS_DIR"

// ServeIfChild runs the server of StartProcess when this test binary was
// re-executed as one, and exits once the parent closes its stdin (or
// dies); otherwise it returns at once. A package whose benchmarks use
// StartProcess calls it first thing in its TestMain.
func ServeIfChild() {
	dir := os.Getenv(serverDirEnv)
	if dir == "" {
		return
	}
	opts := embedded.Options(dir)
	opts.ServerName = "test-process"
	s, err := embedded.Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(s.ClientURL())
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Stop()
	os.Exit(0)
}

// Process is a single JetStream server (the embedded one, as Start runs
// it) in a process of its own: this test binary re-executed (see
// ServeIfChild). Its CPU time can then be read apart from the client's,
// which shares the test process. It is stopped when the test ends.
type Process struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	url    string
	exited chan struct{} // its stdout reached its end
}

// StartProcess starts a server process and waits until it accepts clients.
func StartProcess(t testing.TB) *Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), serverDirEnv+"="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	t.Cleanup(p.stop)
	line := make(chan string, 1)
	go func() {
		defer close(p.exited)
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case p.url = <-line:
	case <-time.After(30 * time.Second):
	}
	if !strings.HasPrefix(p.url, "nats://") {
		t.Fatalf("the server process did not start: %q %s", p.url, stderr.String())
	}
	return p
}

// URL is the client URL.
func (p *Process) URL() string { return p.url }

// Pid is the server process's id: its CPU time is ProcessCPU(Pid()).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

func (p *Process) stop() {
	p.stdin.Close() // the server stops and the process exits
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	_ = p.cmd.Wait()
}

// ProcessCPU reads a process's CPU time (utime + stime of every thread)
// from /proc/<pid>/stat; pid 0 is this process. The kernel counts in
// USER_HZ ticks, which /proc always reports at 100 per second: 10 ms
// resolution.
func ProcessCPU(pid int) (time.Duration, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name (2nd field) is in parentheses and may hold spaces:
	// count the fields after its closing one, where state is field 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: unexpected format", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: unexpected format", path)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: unexpected format", path)
	}
	const userHZ = 100
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}
