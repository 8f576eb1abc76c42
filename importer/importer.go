package importer

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/producer"
)

// Defaults of Config.
const (
	DefaultSource     = "import"
	DefaultChunkLines = 5000
	DefaultMaxErrors  = 100
	// MaxLine bounds one line of the file in bytes.
	MaxLine = 1 << 20
)

// Config configures Run.
type Config struct {
	// File is the NDJSON file to import. Required.
	File string
	// Source names the system the file comes from. It namespaces the
	// external ids: the same external id in two sources is two
	// conversations. Default DefaultSource.
	Source string
	// ChunkLines is how many lines are appended between two checkpoints:
	// more is faster (fewer waits for the log's acknowledgement), less
	// repeats fewer lines after a kill. Default DefaultChunkLines.
	ChunkLines int
	// MaxErrors is how many refused lines are listed before the check
	// stops reading. Default DefaultMaxErrors.
	MaxErrors int
	// MaxBody is the body limit (the producer's and fanout's). Default
	// events.DefaultMaxBody.
	MaxBody int
	// CheckOnly checks the file and writes nothing.
	CheckOnly bool
	// Restart ignores the file's checkpoint and appends every line again
	// (each is still projected at most once).
	Restart bool
	// Wait waits, after appending, until the fanout has projected what was
	// appended, then checks that every message of the file was projected.
	Wait bool
	// Progress receives a line every ProgressEvery. Default: none.
	Progress io.Writer
	// ProgressEvery. Default 2s.
	ProgressEvery time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of imported_at. Default time.Now.
	Now func() time.Time
	// Servers, on a sharded deployment, are every server's pools (the
	// catalog's, the pool given to Run, first): the wait reads each
	// server's offsets of its partitions, and the check counts the
	// messages on their conversations' servers. The ids and checkpoints
	// stay on the catalog. Nil: the one server.
	Servers []*pgxpool.Pool

	// lineHook, in tests, is called after each line is handed to the
	// producer.
	lineHook func(line int64)
}

func (c *Config) setDefaults() {
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.ChunkLines == 0 {
		c.ChunkLines = DefaultChunkLines
	}
	if c.MaxErrors == 0 {
		c.MaxErrors = DefaultMaxErrors
	}
	if c.MaxBody == 0 {
		c.MaxBody = events.DefaultMaxBody
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	switch {
	case c.File == "":
		return errors.New("importer: no file")
	case c.ChunkLines < 1:
		return fmt.Errorf("importer: chunk lines %d < 1", c.ChunkLines)
	case c.MaxErrors < 1:
		return fmt.Errorf("importer: max errors %d < 1", c.MaxErrors)
	}
	return nil
}

// Result says what a run did.
type Result struct {
	Lines, Conversations, Members, Messages int64 // of the file
	SHA256                                  string
	// From is the first line this run appended (1: from the start); past
	// the last line when the file was imported already.
	From int64
	// Appended counts the events this run appended.
	Appended int64
	// Append is the time spent appending; Total the time from the start of
	// the appends until they were projected (Wait), or Append.
	Append, Total time.Duration
}

// Rate is the messages of the file per second of Total (end to end with
// Wait), 0 when nothing was appended.
func (r Result) Rate() float64 {
	if r.Appended == 0 || r.Total <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Total.Seconds()
}

// Run imports cfg.File: it checks every line (a file with a refused line
// is a *RefusedError and writes nothing), maps the conversations to
// inboxd ids, appends the events from the checkpoint on, and with Wait
// waits for their projection. Cancelling ctx stops it; a rerun resumes
// from the last checkpoint.
func Run(ctx context.Context, cfg Config, pool *pgxpool.Pool, prod *producer.Producer) (Result, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	importedAt := cfg.Now().UTC()
	k := newChecker(cfg.Source, cfg.MaxBody, nil, importedAt)
	res, err := check(cfg, k)
	if err != nil || cfg.CheckOnly {
		return res, err
	}
	ids, err := assignIDs(ctx, pool, cfg.Source, k.order)
	if err != nil {
		return res, err
	}
	cp, err := loadCheckpoint(ctx, pool, cfg.Source, res.SHA256)
	if err != nil {
		return res, err
	}
	if cfg.Restart {
		cp = checkpoint{next: 1}
	}
	res.From = cp.next
	if cp.done {
		res.From = res.Lines + 1
		cfg.Logger.Info("import: file already imported; nothing to append (--restart appends it again)",
			"source", cfg.Source, "sha256", res.SHA256)
		return res, nil
	}
	a := &appender{cfg: cfg, pool: pool, prod: prod, sum: res.SHA256, ends: map[int32]int64{}}
	start := time.Now()
	if err := a.run(ctx, newChecker(cfg.Source, cfg.MaxBody, ids, importedAt), cp.next, &res); err != nil {
		return res, err
	}
	res.Append = time.Since(start)
	res.Total = res.Append
	if !cfg.Wait {
		return res, nil
	}
	if err := a.waitProjected(ctx, start, &res); err != nil {
		return res, err
	}
	res.Total = time.Since(start)
	return res, checkProjected(ctx, cfg.servers(pool), ids, res.Messages)
}

// scan calls fn with each non-blank line of the file and its number.
func scan(path string, sum io.Writer, fn func(n int64, raw []byte) error) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open import file: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if sum != nil {
		r = io.TeeReader(f, sum)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	var n int64
	for sc.Scan() {
		n++
		raw := sc.Bytes()
		if len(trimSpace(raw)) == 0 {
			continue // a blank line is no data
		}
		if err := fn(n, raw); err != nil {
			return n, err
		}
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("read import file at line %d: %w", n+1, err)
	}
	return n, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// check reads the whole file through k, collecting refused lines.
func check(cfg Config, k *checker) (Result, error) {
	var res Result
	refused := &RefusedError{}
	h := sha256.New()
	stop := errors.New("too many refused lines")
	n, err := scan(cfg.File, h, func(n int64, raw []byte) error {
		l, err := parseLine(raw)
		if err == nil {
			_, err = k.line(l)
		}
		if err != nil {
			if len(refused.Lines) == cfg.MaxErrors {
				refused.More++
				return stop
			}
			refused.Lines = append(refused.Lines, &LineError{Line: n, Reason: err.Error()})
		}
		return nil
	})
	res.Lines, res.Conversations, res.Members, res.Messages = n, k.conversations, k.members, k.messages
	if errors.Is(err, stop) {
		refused.More = -1 // the rest was not read
		return res, refusedErr(refused)
	}
	if err != nil {
		return res, err
	}
	if len(refused.Lines) > 0 {
		return res, refused
	}
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	return res, nil
}

// refusedErr is r with More meaning "not read further" when negative.
func refusedErr(r *RefusedError) error {
	if r.More < 0 {
		return fmt.Errorf("%w\n  (stopped reading after %d refused lines)", &RefusedError{Lines: r.Lines}, len(r.Lines))
	}
	return r
}

// appender appends the events of the file and keeps its checkpoint.
type appender struct {
	cfg  Config
	pool *pgxpool.Pool
	prod *producer.Producer
	sum  string

	mu   sync.Mutex
	ends map[int32]int64 // partition -> the offset after the last appended record
	err  error
}
