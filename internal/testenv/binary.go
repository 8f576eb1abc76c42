package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary builds cmd/inboxd once per test binary and returns its path; under
// the race detector, with it (a race in a child fails the test that
// started it).
func Binary(t testing.TB) string {
	t.Helper()
	pgtest.SkipIfUnit(t)
	path, err := BuildBinary()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// BuildBinary is Binary for code without a testing.TB (a TestMain).
func BuildBinary() (string, error) {
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "inboxd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "inboxd")
		args := []string{"build", "-o", buildPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/inboxd")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	return buildPath, buildErr
}

// Proc is a subprocess of the inboxd binary whose output is kept.
type Proc struct {
	cmd     *exec.Cmd
	started time.Time
	mu      sync.Mutex
	out     bytes.Buffer
	done    chan struct{}
	err     error
}

// stopGrace is how long after its start Stop lets a process run before it
// sends SIGTERM: a Go binary catches the signal only once its main has
// installed the handler, and one signalled during the runtime's start-up
// dies of it ("signal: terminated") instead of stopping cleanly, which is
// no fault of the process (a kill test's last restart, stopped at once).
const stopGrace = time.Second

// Start runs the binary with args and env (added to the test's own) and
// kills it at the test's end if it still runs. The tests' brokers are one
// (kfake or a single-node Kafka), so topics are created with one replica
// unless env says otherwise (the binary refuses the default 3 there).
func Start(t testing.TB, env []string, args ...string) *Proc {
	t.Helper()
	p, err := StartProcess(env, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if err := p.RaceReport(); err != nil {
			t.Errorf("inboxd %v: %v", args, err)
		}
	})
	return p
}

// StartProcess is Start for code without a testing.TB (a TestMain): the
// caller stops the process.
func StartProcess(env []string, args ...string) (*Proc, error) {
	bin, err := BuildBinary()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), "INBOXD_REPLICATION_FACTOR=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &Proc{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.Write(sc.Bytes())
			p.out.WriteByte('\n')
			p.mu.Unlock()
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// RaceReport returns an error with the output if the race detector
// reported a race in the process.
func (p *Proc) RaceReport() error {
	if out := p.Output(); bytes.Contains([]byte(out), []byte("WARNING: DATA RACE")) {
		return fmt.Errorf("the race detector reported a race:\n%s", out)
	}
	return nil
}

// Output returns what the process printed so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// WaitOutput waits until the output contains s.
func (p *Proc) WaitOutput(s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if bytes.Contains([]byte(p.Output()), []byte(s)) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("process exited (%v) before printing %q:\n%s", p.err, s, p.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("no %q after %v:\n%s", s, timeout, p.Output())
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill ends the process with SIGKILL and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM (once the process has run stopGrace) and waits up to
// timeout; it returns the exit error.
func (p *Proc) Stop(timeout time.Duration) error {
	select {
	case <-p.done:
	case <-time.After(time.Until(p.started.Add(stopGrace))):
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("did not exit within %v after SIGTERM", timeout)
	}
}

// Wait waits up to timeout for the process to end by itself and returns its
// exit error (nil for status 0).
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("still running after %v:\n%s", timeout, p.Output())
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitFor polls cond every 10 ms until it holds, and fails t with what
// after timeout: the timeout only prevents a hang, it asserts no speed.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ctx is a helper for a bounded background context.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
