package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// RunChild runs a child of the orchestrator: `serve <json>` (the server
// under test) or `worker <kind> <json>` (a load generator). Children write
// protocol lines to stdout, diagnostics to stderr, read commands from stdin,
// and end by themselves at their deadline.
func RunChild(ctx context.Context, args []string) error {
	if _, err := RaiseOpenFiles(); err != nil {
		fmt.Fprintf(os.Stderr, "warning: %v\n", err)
	}
	if len(args) < 2 {
		return errors.New("usage: inboxd-bench serve <json> | inboxd-bench worker <kind> <json>")
	}
	cio := newChildIO()
	var err error
	switch args[0] {
	case "serve":
		err = runServe(ctx, cio, []byte(args[1]))
	case "worker":
		if len(args) < 3 {
			return errors.New("usage: inboxd-bench worker <kind> <json>")
		}
		raw := []byte(args[2])
		switch args[1] {
		case "e2e":
			err = runE2EWorker(ctx, cio, raw)
		case "sync":
			err = runSyncWorker(ctx, cio, raw)
		case "idle":
			err = runIdleWorker(ctx, cio, raw)
		case "storm":
			err = runStormWorker(ctx, cio, raw)
		case "changes":
			err = runChangesWorker(ctx, cio, raw)
		case "large":
			err = runLargeWorker(ctx, cio, raw)
		default:
			err = fmt.Errorf("unknown worker %q", args[1])
		}
	default:
		err = fmt.Errorf("unknown child %q", args[0])
	}
	if err != nil {
		cio.emit("error", err.Error())
	}
	return err
}

// IsChild reports whether args (the command line of inboxd-bench, without
// the program name) name a child command.
func IsChild(args []string) bool {
	return len(args) > 0 && (args[0] == "serve" || args[0] == "worker")
}

// childIO is the child's side of the line protocol.
type childIO struct {
	mu  sync.Mutex
	out *bufio.Writer
	in  chan string // lines from stdin; closed at EOF
}

func newChildIO() *childIO {
	c := &childIO{out: bufio.NewWriter(os.Stdout), in: make(chan string, 16)}
	go func() {
		defer close(c.in)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			c.in <- sc.Text()
		}
	}()
	return c
}

// emit writes "kind payload", payload being a string or JSON of v.
func (c *childIO) emit(kind string, v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch p := v.(type) {
	case nil:
		fmt.Fprintln(c.out, kind)
	case string:
		fmt.Fprintln(c.out, kind, strings.ReplaceAll(p, "\n", " "))
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			fmt.Fprintln(c.out, "error", err)
		} else {
			fmt.Fprintln(c.out, kind, string(raw))
		}
	}
	_ = c.out.Flush()
}

// next waits for the next command line; ok is false at EOF or when ctx
// ends.
func (c *childIO) next(ctx context.Context) (cmd string, ok bool) {
	select {
	case l, ok := <-c.in:
		return l, ok
	case <-ctx.Done():
		return "", false
	}
}

// nextPhase waits for the next "phase <json>" command of a worker and
// decodes its argument; ok is false at "quit", at EOF or when ctx ends.
func nextPhase[T any](ctx context.Context, c *childIO, worker string) (cmd T, ok bool, err error) {
	line, ok := c.next(ctx)
	if !ok || line == "quit" {
		return cmd, false, nil
	}
	kind, arg, _ := strings.Cut(line, " ")
	if kind != "phase" {
		return cmd, false, fmt.Errorf("%s worker: unknown command %q", worker, line)
	}
	if err := json.Unmarshal([]byte(arg), &cmd); err != nil {
		return cmd, false, fmt.Errorf("%s worker: %w", worker, err)
	}
	return cmd, true, nil
}

// logf writes a diagnostic line to stderr (the orchestrator shows it).
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// withDeadline bounds a child: it ends at d whatever its orchestrator does.
func withDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = 10 * time.Minute
	}
	return context.WithTimeout(ctx, d)
}

// sourceDialer returns a dial function that spreads connections over the
// source addresses ips (127.0.0.x), round robin. Targets are loopback only:
// anything else is refused.
func sourceDialer(ips []string, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var dialers []*net.Dialer
	for _, ip := range ips {
		dialers = append(dialers, &net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}})
	}
	if len(dialers) == 0 {
		dialers = append(dialers, &net.Dialer{Timeout: timeout})
	}
	var mu sync.Mutex
	n := 0
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := loopbackOnly(addr); err != nil {
			return nil, err
		}
		mu.Lock()
		d := dialers[n%len(dialers)]
		n++
		mu.Unlock()
		return d.DialContext(ctx, network, addr)
	}
}

// loopbackOnly refuses any target that is not a loopback address: the
// benchmarks load only servers on this machine.
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("bench: refusing to load %s: targets must be loopback addresses", addr)
}

// sourceIPs returns n source addresses 127.0.0.<first>...
func sourceIPs(first, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("127.0.0.%d", first+i))
	}
	return out
}

// discard drains r (for response bodies).
func discard(r io.Reader) { _, _ = io.Copy(io.Discard, r) }
