package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/stretchr/testify/require"
)

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// `make run` on a terminal, stopped with Ctrl-C, stops inboxd cleanly and
// exits 0 (it used to end with "make: *** [Makefile:8: run] Error 1").
// util-linux's script gives make a pseudo-terminal; the Ctrl-C byte written
// to it reaches the terminal's foreground job as SIGINT, as a keyboard's would.
func TestMakeRunCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bin/inboxd and starts dev")
	}
	for _, tool := range []string{"script", "make", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	var (
		stdin io.WriteCloser
		out   *lockedBuffer
		done  chan error
	)
	for attempt := 0; ; attempt++ {
		var started bool
		stdin, out, done, started = startMakeRun(t, newDevInstance(t))
		if started {
			break
		}
		// A port picked free was taken since by another test's process.
		require.True(t, attempt < 3 && testenv.PortTaken(out.String()), "dev did not start:\n%s", out.String())
	}
	_, err := stdin.Write([]byte{3}) // Ctrl-C
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err, "make run exits 0 on Ctrl-C:\n%s", out.String())
	case <-time.After(time.Minute):
		t.Fatalf("make run still runs a minute after Ctrl-C:\n%s", out.String())
	}
	require.Contains(t, out.String(), "inboxd dev stopped")
	require.NotContains(t, out.String(), "Error 1")
}

// startMakeRun runs `make run` for d under a pseudo-terminal and waits for
// dev's fanout; started is false when make ended first.
func startMakeRun(t *testing.T, d devInstance) (stdin io.WriteCloser, out *lockedBuffer, done chan error, started bool) {
	args := strings.Join(d.Args()[1:], " ")
	cmd := exec.Command("script", "-qefc", fmt.Sprintf("make run ARGS='%s'", args), "/dev/null")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "INBOXD_KAFKA_BROKERS=", "DATABASE_URL=", "INBOXD_REPLICATION_FACTOR=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(out.String(), "partitions assigned") {
		require.True(t, time.Now().Before(deadline), "dev did not start:\n%s", out.String())
		select {
		case <-done:
			return stdin, out, done, false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return stdin, out, done, true
}
