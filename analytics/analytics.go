package analytics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/kgroup"
)

// Defaults of Config.
const (
	DefaultGroup          = "inboxd-analytics"
	DefaultWindow         = time.Minute
	DefaultTopSenders     = 10
	DefaultMaxPollRecords = 10000
	DefaultCommitInterval = 5 * time.Second
)

// fanoutGroup is fanout.DefaultGroup (not imported: analytics must not
// depend on the projections). Joining it would take partitions away from
// fanout.
const fanoutGroup = "inboxd-fanout"

// DefaultFanOutBuckets are the upper bounds of the fan-out size histogram.
// 0 holds the rejected sends; the last bound is events.MaxMembers.
func DefaultFanOutBuckets() []float64 {
	return []float64{0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, events.MaxMembers}
}

// Config configures an Analytics.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Topic to consume. Default events.DefaultTopic.
	Topic string
	// Group is the consumer group, committed to Kafka. It must not be
	// fanout's group: members of one group share the partitions, so
	// analytics would take records away from fanout. A new group starts at
	// the earliest offset. Default DefaultGroup.
	Group string
	// Window of messages per minute and active conversations, over the
	// events' "at" (when the gateway accepted them) ending at Now, to the
	// second: a replayed or late record counts where it belongs in time,
	// and a replay of old history adds nothing to the live rate. At least
	// one second; truncated to whole seconds. Default DefaultWindow.
	Window time.Duration
	// TopSenders is how many senders Figures and the metrics list.
	// Default DefaultTopSenders.
	TopSenders int
	// FanOutBuckets are the increasing upper bounds of the fan-out size
	// histogram. Default DefaultFanOutBuckets().
	FanOutBuckets []float64
	// MaxBody is the body limit of a valid message; keep it equal to
	// fanout's so that both judge records alike. Default events.DefaultMaxBody.
	MaxBody int
	// MaxPollRecords bounds one poll. Default DefaultMaxPollRecords.
	MaxPollRecords int
	// CommitInterval between automatic commits of the counted offsets. A
	// crash recounts at most this much in the next process (whose totals
	// start from zero anyway). Default DefaultCommitInterval.
	CommitInterval time.Duration
	// Registerer receives the metrics (namespace inboxd, subsystem
	// analytics). Default none.
	Registerer prometheus.Registerer
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the window. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Topic == "" {
		c.Topic = events.DefaultTopic
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	c.Window = c.Window.Truncate(time.Second)
	if c.TopSenders == 0 {
		c.TopSenders = DefaultTopSenders
	}
	if c.FanOutBuckets == nil {
		c.FanOutBuckets = DefaultFanOutBuckets()
	}
	if c.MaxBody == 0 {
		c.MaxBody = events.DefaultMaxBody
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = DefaultMaxPollRecords
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("analytics: no brokers")
	}
	if c.Group == fanoutGroup {
		return fmt.Errorf("analytics: group %q is fanout's; use a group of your own", c.Group)
	}
	if c.Window < time.Second {
		return fmt.Errorf("analytics: window %v < 1s", c.Window)
	}
	if c.TopSenders < 1 {
		return fmt.Errorf("analytics: top senders %d < 1", c.TopSenders)
	}
	if len(c.FanOutBuckets) == 0 || !slices.IsSorted(c.FanOutBuckets) || len(slices.Compact(slices.Clone(c.FanOutBuckets))) != len(c.FanOutBuckets) {
		return fmt.Errorf("analytics: fan-out buckets %v are not strictly increasing", c.FanOutBuckets)
	}
	if c.MaxBody < 0 {
		return fmt.Errorf("analytics: max body %d < 0", c.MaxBody)
	}
	if c.MaxPollRecords < 1 {
		return fmt.Errorf("analytics: max poll records %d < 1", c.MaxPollRecords)
	}
	if c.CommitInterval < 0 {
		return fmt.Errorf("analytics: commit interval %v < 0", c.CommitInterval)
	}
	return nil
}

// Analytics consumes the topic into live figures. Snapshot and Ping are
// safe for concurrent use with Run; Run may be called once.
type Analytics struct {
	cfg     Config
	started atomic.Bool
	cl      atomic.Pointer[kgo.Client]

	mu sync.Mutex
	st *state
}

// New returns an Analytics and registers its metrics with cfg.Registerer.
func New(cfg Config) (*Analytics, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Analytics{cfg: cfg, st: newState(cfg.Window, cfg.MaxBody, slices.Clone(cfg.FanOutBuckets), cfg.TopSenders)}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newCollector(a)); err != nil {
			return nil, fmt.Errorf("register analytics metrics: %w", err)
		}
	}
	return a, nil
}

// Snapshot returns the current figures.
func (a *Analytics) Snapshot() Figures {
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.snapshot(now)
}

// Ping checks that Run is consuming and the brokers answer: the readiness
// of `inboxd analytics`.
func (a *Analytics) Ping(ctx context.Context) error {
	cl := a.cl.Load()
	if cl == nil {
		return errors.New("analytics is not running")
	}
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("ping kafka: %w", err)
	}
	return nil
}

// Run consumes until ctx ends; it returns nil on a clean stop. Fetch
// errors are logged and retried by the client. On the way out it commits
// what it counted and leaves the group.
func (a *Analytics) Run(ctx context.Context) error {
	if a.started.Swap(true) {
		return errors.New("analytics: Run called twice")
	}
	opts := append(kgroup.Member{Brokers: a.cfg.Brokers, ClientID: "inboxd-analytics", Group: a.cfg.Group, Topic: a.cfg.Topic,
		FetchMaxWait: 500 * time.Millisecond, Offsets: a.assigned}.Opts(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Only counted records are marked, so a replay never moves the
		// committed offset back; the batch is counted and marked before a
		// rebalance may revoke its partitions.
		kgo.AutoCommitMarks(),
		kgo.OnPartitionsRevoked(a.revoked),
		kgo.OnPartitionsLost(a.lost),
		kgo.AutoCommitInterval(a.cfg.CommitInterval),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("analytics client: %w", err)
	}
	a.cl.Store(cl)
	defer a.cl.Store(nil)
	log := a.cfg.Logger
	log.Info("analytics started", "topic", a.cfg.Topic, "group", a.cfg.Group)
	for {
		fetches := cl.PollRecords(ctx, a.cfg.MaxPollRecords)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		cl.MarkCommitRecords(a.process(fetches)...)
		cl.AllowRebalance()
	}
	cl.AllowRebalance()
	// Leaving the group revokes every partition; revoked commits.
	cl.Close()
	log.Info("analytics stopped", "topic", a.cfg.Topic, "group", a.cfg.Group)
	return nil
}

// process counts one poll and returns the last counted record of each
// partition, to be marked for commit.
func (a *Analytics) process(fetches kgo.Fetches) []*kgo.Record {
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	var marks []*kgo.Record
	fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
		if len(ftp.Records) == 0 {
			return
		}
		p := a.st.parts[ftp.Partition]
		if p == nil {
			// Every assignment passes through assigned; be safe anyway.
			a.cfg.Logger.Warn("records of a partition never assigned, counting from here",
				"topic", ftp.Topic, "partition", ftp.Partition, "offset", ftp.Records[0].Offset)
			p = newPartition(ftp.Records[0].Offset)
			a.st.parts[ftp.Partition] = p
		}
		var last *kgo.Record
		for _, r := range ftp.Records {
			counted, err := a.st.handle(p, r, now)
			if err != nil && counted {
				a.cfg.Logger.Debug("invalid record skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			}
			if counted {
				last = r
			}
		}
		if last != nil {
			marks = append(marks, last)
		}
	})
	a.st.prune(now, false)
	return marks
}

// assigned starts every newly assigned partition over from its start: the
// group's committed offset becomes where counting resumes.
func (a *Analytics) assigned(_ context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for topic, parts := range offsets {
		for id, o := range parts {
			resume := o.EpochOffset().Offset
			if resume < 0 {
				resume = 0 // no commit: a new group counts everything
			}
			a.st.parts[id] = newPartition(resume)
			parts[id] = kgo.NewOffset().AtStart().WithEpoch(-1)
			a.cfg.Logger.Info("partition assigned", "topic", topic, "partition", id, "offset", resume)
		}
	}
	return offsets, nil
}

// revoked commits what was counted, then forgets the partitions.
func (a *Analytics) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		a.cfg.Logger.Warn("committing counted offsets failed; the next owner recounts them", "partitions", revoked, "err", err)
	}
	a.drop(revoked)
}

// lost forgets the partitions; a commit would fail.
func (a *Analytics) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	a.cfg.Logger.Warn("partitions lost", "partitions", lost)
	a.drop(lost)
}

func (a *Analytics) drop(m map[string][]int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for topic, ids := range m {
		for _, id := range ids {
			delete(a.st.parts, id)
		}
		if len(ids) > 0 {
			a.cfg.Logger.Info("partitions revoked", "topic", topic, "partitions", ids)
		}
	}
}
