package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/pgserver"
	"github.com/inboxd/inboxd/migrations"
	"github.com/inboxd/inboxd/producer"
)

// EnvConfig configures NewEnv.
type EnvConfig struct {
	// DatabaseURL is an admin URL of a PostgreSQL server on which the run
	// creates (and drops) its databases. Empty starts a private server
	// (internal/pgserver) for the run, with fsync on, as in production.
	DatabaseURL string
	// OutDir receives profiles and other artifacts. Empty: a temporary
	// directory, removed by Close.
	OutDir string
	// Runner starts the child processes. Default DefaultRunner().
	Runner *Runner
	// Progress receives progress lines (and the children's stderr).
	// Default os.Stderr.
	Progress io.Writer
}

// Env is the infrastructure of a run: PostgreSQL, a place for artifacts
// and the way to start children. Kafka (kfake) is per figure, see newKafka.
type Env struct {
	AdminURL string
	// PGData is the data directory of the private server, for CPU
	// accounting of its processes; empty with DatabaseURL.
	PGData   string
	OutDir   string
	Runner   Runner
	Progress io.Writer
	Log      *slog.Logger

	pg      *pgserver.Server
	tmp     string
	rmOut   bool
	dbCount atomic.Int64
}

// NewEnv starts what cfg does not point at. Close it.
func NewEnv(ctx context.Context, cfg EnvConfig) (*Env, error) {
	e := &Env{AdminURL: cfg.DatabaseURL, OutDir: cfg.OutDir, Progress: cfg.Progress}
	if e.Progress == nil {
		e.Progress = os.Stderr
	}
	e.Log = slog.New(slog.NewTextHandler(e.Progress, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.Runner != nil {
		e.Runner = *cfg.Runner
	} else {
		r, err := DefaultRunner()
		if err != nil {
			return nil, err
		}
		e.Runner = r
	}
	tmp, err := os.MkdirTemp("", "inboxd-bench-")
	if err != nil {
		return nil, err
	}
	e.tmp = tmp
	if e.OutDir == "" {
		e.OutDir = filepath.Join(tmp, "out")
	}
	if err := os.MkdirAll(e.OutDir, 0o755); err != nil {
		e.Close()
		return nil, err
	}
	if e.AdminURL == "" {
		s, err := pgserver.Start(ctx, pgserver.Config{Dir: filepath.Join(tmp, "pg"), Logger: e.Log})
		if err != nil {
			e.Close()
			return nil, err
		}
		e.pg = s
		e.AdminURL = s.URL
		e.PGData = filepath.Join(tmp, "pg", "pgdata")
	}
	return e, nil
}

// Close stops the private PostgreSQL and removes the temporary files.
func (e *Env) Close() {
	if e.pg != nil {
		_ = e.pg.Stop()
		e.pg = nil
	}
	if e.tmp != "" {
		_ = os.RemoveAll(e.tmp)
	}
}

// newDatabase creates and migrates a fresh database; drop removes it.
func (e *Env) newDatabase(ctx context.Context, name string) (url string, drop func(), err error) {
	db := fmt.Sprintf("bench_%s_%d_%d", name, os.Getpid(), e.dbCount.Add(1))
	ac, err := pgx.Connect(ctx, e.AdminURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", e.AdminURL, err)
	}
	defer ac.Close(ctx)
	if _, err := ac.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", db, err)
	}
	drop = func() {
		c, err := pgx.Connect(context.Background(), e.AdminURL)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	}
	url = withDB(e.AdminURL, db)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		drop()
		return "", nil, err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		drop()
		return "", nil, fmt.Errorf("migrate %s: %w", db, err)
	}
	return url, drop, nil
}

// postgresPids are the processes of the private server (none with an
// external one).
func (e *Env) postgresPids() []int { return postgresPids(e.PGData) }

// newKafka starts an in-process Kafka (kfake) with partitions per topic.
func newKafka(partitions int) (*kfake.Cluster, error) {
	return kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(partitions))
}

func withDB(u, db string) string {
	i := strings.LastIndex(u, "/")
	q := ""
	if j := strings.Index(u[i:], "?"); j >= 0 {
		q = u[i+j:]
	}
	return u[:i+1] + db + q
}

// Runner starts children: Exe with Args, then the child's own arguments
// ("serve <json>" or "worker <kind> <json>", see RunChild).
type Runner struct {
	Exe  string
	Args []string
	Env  []string // added to the orchestrator's environment
}

// DefaultRunner runs this executable again: the orchestrator is
// cmd/inboxd-bench, whose main hands `serve` and `worker` to RunChild.
// The server binary, cmd/inboxd, has no such command.
func DefaultRunner() (Runner, error) {
	exe, err := os.Executable()
	if err != nil {
		return Runner{}, fmt.Errorf("find the inboxd-bench executable for the children: %w", err)
	}
	return Runner{Exe: exe}, nil
}

// child is a running child process seen from the orchestrator: lines to
// its stdin, protocol lines from its stdout, its stderr into progress.
type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error

	mu sync.Mutex
}

// start runs a child `<kind> <json of cfg>` (kind "serve" or "worker <x>").
func (r Runner) start(progress io.Writer, name string, kind []string, cfg any) (*child, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	args := append(append(append([]string{}, r.Args...), kind...), string(raw))
	cmd := exec.Command(r.Exe, args...)
	cmd.Env = append(os.Environ(), r.Env...)
	// The child dies with the orchestrator, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if progress != nil {
				fmt.Fprintf(progress, "  [%s] %s\n", name, sc.Text())
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	go func() {
		wg.Wait()
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// send writes one line to the child's stdin.
func (c *child) send(line string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// expect waits for the next protocol line of the given kind ("ready",
// "result", ...) and returns what follows the kind. Other lines are
// skipped.
func (c *child) expect(ctx context.Context, kind string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				<-c.done
				return "", fmt.Errorf("%s exited (%v) before %q", c.name, c.err, kind)
			}
			k, rest, _ := strings.Cut(l, " ")
			if k == kind {
				return rest, nil
			}
			if k == "error" {
				return "", fmt.Errorf("%s: %s", c.name, rest)
			}
		case <-t.C:
			return "", fmt.Errorf("%s: no %q within %v", c.name, kind, timeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// expectJSON is expect with the rest of the line decoded into v.
func (c *child) expectJSON(ctx context.Context, kind string, timeout time.Duration, v any) error {
	rest, err := c.expect(ctx, kind, timeout)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(rest), v); err != nil {
		return fmt.Errorf("%s: decode %q line: %w", c.name, kind, err)
	}
	return nil
}

// stop asks the child to end (SIGTERM), kills it after timeout and waits.
func (c *child) stop(timeout time.Duration) error {
	select {
	case <-c.done:
		return c.exitErr()
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.exitErr()
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", c.name, timeout)
	}
}

// kill ends the child at once and waits for it; a nil child (never
// started) is a no-op.
func (c *child) kill() {
	if c == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	<-c.done
}

func (c *child) exitErr() error {
	var ee *exec.ExitError
	if errors.As(c.err, &ee) && ee.ExitCode() == -1 {
		return nil // ended by our signal
	}
	return c.err
}

// children is a set of children ended together.
type children []*child

func (cs children) killAll() {
	for _, c := range cs {
		c.kill()
	}
}

// pipeline is what a figure that projects a log needs: a fresh database, a
// pool on it, an in-process kfake and a producer with the topics created.
type pipeline struct {
	url     string
	pool    *pgxpool.Pool
	brokers []string
	prod    *producer.Producer
	closers []func()
}

// newPipeline builds a pipeline; Close releases it in reverse order.
func (e *Env) newPipeline(ctx context.Context, name string, partitions int) (p *pipeline, err error) {
	p = &pipeline{}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	url, drop, err := e.newDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	p.url = url
	p.closers = append(p.closers, drop)
	// Sized as inboxd fanout sizes its pool by default: the apply workers,
	// the advisory lock and retention.
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = max(4, fanout.DefaultApplyWorkers+2)
	if p.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, err
	}
	p.closers = append(p.closers, p.pool.Close)
	cluster, err := newKafka(partitions)
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, cluster.Close)
	p.brokers = cluster.ListenAddrs()
	if p.prod, err = producer.New(producer.Config{Brokers: p.brokers, CreateTopics: true, Partitions: int32(partitions), Logger: e.Log}); err != nil {
		return nil, err
	}
	p.closers = append(p.closers, p.prod.Close)
	if err := p.prod.EnsureTopics(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// settle does what autovacuum and the checkpointer do for a database that
// has been running for a while: fresh statistics (so the statements'
// cached plans are made again for the tables as they are, not as they were
// when the first connection prepared them, nearly empty) and no dirty
// pages from the set-up to write during the measured phase.
func (p *pipeline) settle(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	if _, err := p.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return 0, fmt.Errorf("settle: vacuum: %w", err)
	}
	if _, err := p.pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return 0, fmt.Errorf("settle: checkpoint: %w", err)
	}
	return time.Since(t0), nil
}

// startFanout runs a fanout on the pipeline until stop is called (once or
// more: it returns when the fanout has ended); cfg's Brokers, Logger and
// Registerer are the pipeline's, the env's and a fresh registry, reg,
// whose batch metrics the figures read.
func (p *pipeline) startFanout(ctx context.Context, env *Env, cfg fanout.Config) (reg *prometheus.Registry, stop func(), err error) {
	reg = prometheus.NewRegistry()
	cfg.Brokers, cfg.Logger, cfg.Registerer = p.brokers, env.Log, reg
	fo, err := fanout.New(cfg, p.pool)
	if err != nil {
		return nil, nil, err
	}
	fctx, cancel := context.WithCancel(ctx)
	fdone := make(chan error, 1)
	go func() { fdone <- fo.Run(fctx) }()
	return reg, sync.OnceFunc(func() { cancel(); <-fdone }), nil
}

// appendConversations creates n conversations of members distinct users
// each (ids from 1), from their first member, through the producer.
func appendConversations(ctx context.Context, prod *producer.Producer, n, members int) ([]e2eConv, error) {
	convs := make([]e2eConv, n)
	for i := range convs {
		c := e2eConv{ID: int64(i + 1)}
		for k := 0; k < members; k++ {
			c.Members = append(c.Members, int64(i*members+k+1))
		}
		convs[i] = c
		e := events.New(events.ConversationCreated, c.ID, c.Members[0])
		e.Title = "bench"
		e.Members = c.Members[1:]
		if _, err := prod.Append(ctx, e); err != nil {
			return nil, fmt.Errorf("create conversation %d: %w", c.ID, err)
		}
	}
	return convs, nil
}

// Close releases what newPipeline built.
func (p *pipeline) Close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}
