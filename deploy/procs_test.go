package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// proc is one process of the topology, in its own process group (so that
// stopping it reaches whatever it started: HAProxy's worker, a JVM behind a
// script), killed with the test binary if that dies first. Its output goes
// to a log file of the run.
type proc struct {
	name     string
	svc      *service
	cmd      *exec.Cmd
	log      string
	done     chan struct{}
	err      error
	stopping atomic.Bool
	// stop, when set, replaces the SIGTERM (PostgreSQL, stopped by pgserver).
	stop func() error
}

func startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, strings.Join(argv, " "), err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate sends SIGTERM, as `docker compose stop` does, and waits up to
// grace; then SIGKILL to the whole group. It returns how the process ended
// and whether it needed the kill.
func (p *proc) terminate(grace time.Duration) (err error, killed bool) {
	p.stopping.Store(true)
	if p.stop != nil {
		return p.stop(), false
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		killed = true
	}
	// Leftovers of the group (a worker of a master that exited) too.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	return p.err, killed
}

// tail is the end of the process's log, for a failure message.
func (p *proc) tail(lines int) string {
	raw, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	ls := bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n"))
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return string(bytes.Join(ls, []byte("\n")))
}

// runOnce runs a command to its end within timeout (a health check, a
// setup step) and returns its combined output.
func runOnce(ctx context.Context, timeout time.Duration, env []string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A timeout ends the whole group: a shell's children too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("timed out after %v", timeout)
	}
	return out.String(), err
}

// procs is every process the test started, in start order.
type procs struct {
	mu   sync.Mutex
	list []*proc
}

func (ps *procs) add(p *proc) {
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
}

func (ps *procs) all() []*proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return append([]*proc(nil), ps.list...)
}
