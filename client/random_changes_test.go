package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/testenv"
)

// The randomized workload of the chat layer's changes: sends, replies,
// edits, deletes, reactions and membership changes made through the SDK by
// users who may make them, while a duplicator appends copies of send and
// change records to the log, the fanout process is killed with SIGKILL and
// restarted, and devices go offline (one past the too-long lag). At the end
// the projections hold I1–I8 and M1–M6, the server's state is the model's,
// each change applied once, and every device's view (built from its
// callbacks) is the history the server serves that user: equal over its
// current span of membership, and over earlier spans as the rule of a
// removed member says (requireDeviceView).

const (
	rcConvs = 4   // conversations, one driver each
	rcOps   = 150 // operations per conversation
	rcKills = 6   // SIGKILLs of the fanout during the workload
	rcLag   = 30  // the gateway's too-long lag
)

var rcEmoji = []string{"👍", "🎉", "👀", "🔥"}

// rcMsg is the model of a text message.
type rcMsg struct {
	sender, replyTo int64
	text            string
	deleted         bool
	version         int64
	reactions       map[int64]string // user -> emoji
}

// rcConv is the model of a conversation. One driver owns it: each
// operation is waited for until it is projected, so the model is exact.
type rcConv struct {
	id, creator int64
	last        int64
	joined      map[int64]int64 // current members -> the seq of their join
	msgs        map[int64]*rcMsg
}

func (cm *rcConv) members() []int64 { return slices.Sorted(maps.Keys(cm.joined)) }

// visible returns the seqs of text messages user u can see now (its
// current span) for which keep holds, ascending.
func (cm *rcConv) visible(u int64, keep func(*rcMsg) bool) []int64 {
	j, ok := cm.joined[u]
	if !ok {
		return nil
	}
	var out []int64
	for _, s := range slices.Sorted(maps.Keys(cm.msgs)) {
		if s >= j && keep(cm.msgs[s]) {
			out = append(out, s)
		}
	}
	return out
}

// rcDriver runs the operations of one conversation.
type rcDriver struct {
	w       *world
	cm      *rcConv
	rnd     *rand.Rand
	actors  map[int64]*client.Client // each user's always-online device
	n       int
	changes []string // the change_id of every change that changed the message
	noops   []string // those of changes that changed nothing
	pending int      // changes answered 202 and tried again
	kinds   map[string]int
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// step makes one random operation that the model allows.
func (d *rcDriver) step(ctx context.Context) error {
	cm := d.cm
	mem := cm.members()
	for {
		u := pick(d.rnd, mem)
		notDeleted := func(m *rcMsg) bool { return !m.deleted }
		switch k := d.rnd.IntN(100); {
		case k < 30:
			return d.send(ctx, u, 0)
		case k < 40:
			// A reply to any seq the sender can see, system messages and
			// deleted ones included.
			if j := cm.joined[u]; j <= cm.last {
				return d.send(ctx, u, j+d.rnd.Int64N(cm.last-j+1))
			}
		case k < 52:
			if s := cm.visible(u, func(m *rcMsg) bool { return !m.deleted && m.sender == u }); len(s) > 0 {
				return d.change(ctx, u, client.Change{Kind: client.ChangeEdit, Seq: pick(d.rnd, s)})
			}
		case k < 59:
			own := func(m *rcMsg) bool { return !m.deleted && (m.sender == u || cm.creator == u) }
			if s := cm.visible(u, own); len(s) > 0 {
				return d.change(ctx, u, client.Change{Kind: client.ChangeDelete, Seq: pick(d.rnd, s)})
			}
		case k < 77:
			if s := cm.visible(u, notDeleted); len(s) > 0 {
				return d.change(ctx, u, client.Change{Kind: client.ChangeReact, Seq: pick(d.rnd, s), Emoji: pick(d.rnd, rcEmoji)})
			}
		case k < 83:
			// Mostly a reaction the user has; now and then one it has not
			// (a change that changes nothing).
			has := func(m *rcMsg) bool { return m.reactions[u] != "" || d.rnd.IntN(10) == 0 }
			if s := cm.visible(u, has); len(s) > 0 {
				return d.change(ctx, u, client.Change{Kind: client.ChangeUnreact, Seq: pick(d.rnd, s)})
			}
		case k < 91:
			var out []int64
			for v := int64(1); v <= int64(len(d.actors)); v++ {
				if _, in := cm.joined[v]; !in {
					out = append(out, v)
				}
			}
			if len(out) > 0 {
				return d.member(ctx, u, pick(d.rnd, out), true)
			}
		default:
			if len(mem) > 2 {
				return d.member(ctx, u, pick(d.rnd, mem), false)
			}
		}
	}
}

func (d *rcDriver) send(ctx context.Context, u, replyTo int64) error {
	cm, c := d.cm, d.actors[u]
	d.n++
	text := fmt.Sprintf("c%d.%d from %d", cm.id, d.n, u)
	var id string
	var err error
	if replyTo > 0 {
		id, err = c.SendReply(ctx, cm.id, replyTo, text)
		d.kinds["reply"]++
	} else {
		id, err = c.Send(ctx, cm.id, text)
		d.kinds["send"]++
	}
	if err != nil {
		return fmt.Errorf("queue a send of user %d: %w", u, err)
	}
	res, err := c.WaitSent(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("wait for send %s of user %d: %w", id, u, err)
	case res.Err != nil:
		return fmt.Errorf("send of user %d (reply to %d) refused: %w", u, replyTo, res.Err)
	case res.Message.Seq != cm.last+1:
		return fmt.Errorf("send of user %d got seq %d, the model expects %d", u, res.Message.Seq, cm.last+1)
	case res.Message.ReplyTo != replyTo:
		return fmt.Errorf("send of user %d: reply_to %d, want %d", u, res.Message.ReplyTo, replyTo)
	}
	cm.last = res.Message.Seq
	cm.msgs[cm.last] = &rcMsg{sender: u, replyTo: replyTo, text: text, version: 1, reactions: map[int64]string{}}
	return nil
}

// change makes ch as user u until it is projected (a 202 is tried again
// with the same change_id), applies it to the model and checks the answer
// against it.
func (d *rcDriver) change(ctx context.Context, u int64, ch client.Change) error {
	cm := d.cm
	m := cm.msgs[ch.Seq]
	ch.ConversationID = cm.id
	if ch.Kind == client.ChangeEdit {
		d.n++
		ch.Body = fmt.Sprintf("c%d.%d edit by %d", cm.id, d.n, u)
	}
	d.kinds[string(ch.Kind)]++
	var res client.ChangeResult
	for {
		var err error
		res, err = d.actors[u].ApplyChange(ctx, ch)
		if err != nil {
			return fmt.Errorf("%s of #%d by user %d: %w", ch.Kind, ch.Seq, u, err)
		}
		if !res.Pending {
			break
		}
		d.pending++
		ch.ChangeID = res.Change.ChangeID
	}
	version := m.version
	switch ch.Kind {
	case client.ChangeEdit:
		m.text = ch.Body
		m.version++
	case client.ChangeDelete:
		if !m.deleted {
			m.deleted, m.text, m.reactions = true, "", map[int64]string{}
			m.version++
		}
	case client.ChangeReact:
		if m.reactions[u] != ch.Emoji {
			m.reactions[u] = ch.Emoji
			m.version++
		}
	case client.ChangeUnreact:
		if m.reactions[u] != "" {
			delete(m.reactions, u)
			m.version++
		}
	}
	if m.version > version {
		d.changes = append(d.changes, res.Change.ChangeID)
	} else {
		d.noops = append(d.noops, res.Change.ChangeID)
	}
	got := res.Message
	if want := rcDescribe(m, ch.Seq, u); rcAnswer(*got) != want {
		return fmt.Errorf("%s of conversation %d #%d by user %d answered %s, the model says %s",
			ch.Kind, cm.id, ch.Seq, u, rcAnswer(*got), want)
	}
	return nil
}

// rcDescribe is the model's message as reader sees it, in rcAnswer's form.
func rcDescribe(m *rcMsg, seq, reader int64) string {
	counts := map[string]int{}
	for _, e := range m.reactions {
		counts[e]++
	}
	var rs []string
	for _, e := range slices.Sorted(maps.Keys(counts)) {
		rs = append(rs, fmt.Sprintf("%s%d%v", e, counts[e], m.reactions[reader] == e))
	}
	slices.Sort(rs)
	return fmt.Sprintf("#%d v%d %q deleted=%v reply=%d %v", seq, m.version, m.text, m.deleted, m.replyTo, rs)
}

func rcAnswer(m client.Message) string {
	var rs []string
	for _, r := range m.Reactions {
		rs = append(rs, fmt.Sprintf("%s%d%v", r.Emoji, r.Count, r.Me))
	}
	slices.Sort(rs)
	return fmt.Sprintf("#%d v%d %q deleted=%v reply=%d %v", m.Seq, m.CurrentVersion(), m.Text(), m.Deleted, m.ReplyTo, rs)
}

// member adds or removes target as actor and waits until the projection
// shows it; the system message takes the next seq.
func (d *rcDriver) member(ctx context.Context, actor, target int64, add bool) error {
	cm, c := d.cm, d.actors[actor]
	op := "remove"
	if add {
		op = "add"
	}
	d.kinds[op]++
	for {
		var err error
		if add {
			err = c.AddMember(ctx, cm.id, target)
		} else {
			err = c.RemoveMember(ctx, cm.id, target)
		}
		var ae *client.APIError
		if err == nil {
			break
		}
		if !errors.As(err, &ae) || !ae.Temporary() || !sleepFor(ctx, 50*time.Millisecond) {
			return fmt.Errorf("%s user %d to/from conversation %d as user %d: %w", op, target, cm.id, actor, err)
		}
	}
	var seq int64
	err := pollUntil(ctx, func() (bool, error) {
		var joined int64
		var left *int64
		err := d.w.env.ConvPool(cm.id).QueryRow(ctx, `SELECT joined_seq, left_seq FROM member_spans
WHERE conversation_id = $1 AND user_id = $2 ORDER BY joined_seq DESC LIMIT 1`, cm.id, target).Scan(&joined, &left)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil // never a member, not yet projected
		}
		if err != nil {
			return false, err
		}
		switch {
		case add && left == nil && joined > cm.last:
			seq = joined
		case !add && left != nil && joined == cm.joined[target]:
			seq = *left
		default:
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s user %d in conversation %d: %w", op, target, cm.id, err)
	}
	if seq != cm.last+1 {
		return fmt.Errorf("%s user %d in conversation %d: system message at seq %d, the model expects %d", op, target, cm.id, seq, cm.last+1)
	}
	cm.last = seq
	if add {
		cm.joined[target] = seq
	} else {
		delete(cm.joined, target)
	}
	return nil
}

func sleepFor(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// pollUntil polls cond until it holds, an error, or ctx ends.
func pollUntil(ctx context.Context, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if !sleepFor(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// rcDevice is one device of a user: an SDK client with a file store in the
// test's directory, and its app's record of what it was handed.
// viewOf replays what d's handler was handed of conversation cid: the
// last state of each message, and what broke the client's contract on the
// way (docs/client.md): a message delivered twice (OnEntry or OnHistory),
// a version handed twice or going back. With entryOrder, the OnEntry
// deliveries must also come in seq order.
func (d *rcDevice) viewOf(cid int64, entryOrder bool) (view map[int64]client.Message, bad []string) {
	view = map[int64]client.Message{}
	delivered := map[int64]bool{}
	hows := map[int64][]string{}
	var lastEntry int64
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.handed {
		m := h.m
		if m.ConversationID != cid {
			continue
		}
		hows[m.Seq] = append(hows[m.Seq], fmt.Sprintf("%s v%d", h.how, m.CurrentVersion()))
		had, seen := view[m.Seq]
		update := h.how == "OnUpdate"
		switch {
		case !update && delivered[m.Seq]:
			bad = append(bad, fmt.Sprintf("#%d delivered twice: %v", m.Seq, hows[m.Seq]))
		case seen && m.CurrentVersion() < had.CurrentVersion(),
			seen && m.CurrentVersion() == had.CurrentVersion() && (update || delivered[m.Seq]):
			bad = append(bad, fmt.Sprintf("#%d handed v%d after v%d: %v", m.Seq, m.CurrentVersion(), had.CurrentVersion(), hows[m.Seq]))
		}
		if entryOrder && strings.HasPrefix(h.how, "OnEntry") {
			if m.Seq <= lastEntry {
				bad = append(bad, fmt.Sprintf("#%d handed to OnEntry after #%d: %v", m.Seq, lastEntry, hows[m.Seq]))
			}
			lastEntry = max(lastEntry, m.Seq)
		}
		delivered[m.Seq] = delivered[m.Seq] || !update
		view[m.Seq] = m
	}
	return view, bad
}

type rcDevice struct {
	name    string
	user    int64
	tr      client.Transport
	path    string
	app     *app
	c       *client.Client
	fs      *client.FileStore
	r       *running
	cursor  int64 // the saved cursor when it went offline
	offline int   // times

	mu     sync.Mutex
	handed []rcHanded // every message state handed to the app, in order
}

// rcHanded is a message state handed to the app, and by which callback.
type rcHanded struct {
	how string
	m   client.Message
}

// handler is the app's handler, also recording which callback handed over
// each message state.
func (d *rcDevice) handler() client.Handler {
	h := d.app.handler()
	note := func(how string, ms ...client.Message) {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, m := range ms {
			d.handed = append(d.handed, rcHanded{how, m})
		}
	}
	onEntry, onUpdate, onHistory := h.OnEntry, h.OnUpdate, h.OnHistory
	h.OnEntry = func(ctx context.Context, e client.Entry) error {
		err := onEntry(ctx, e)
		if err == nil && e.Kind == client.KindMessage {
			note(fmt.Sprintf("OnEntry(%d)", e.InboxSeq), *e.Message)
		}
		return err
	}
	h.OnUpdate = func(ctx context.Context, m client.Message) error {
		note("OnUpdate", m)
		return onUpdate(ctx, m)
	}
	h.OnHistory = func(ctx context.Context, cid int64, ms []client.Message) error {
		note("OnHistory", ms...)
		return onHistory(ctx, cid, ms)
	}
	return h
}

func (d *rcDevice) up(t *testing.T, w *world) {
	t.Helper()
	fs, err := client.OpenFileStore(d.path)
	require.NoError(t, err, d.name)
	t.Cleanup(func() { _ = fs.Close() }) // after the Run registered below ends
	cfg := w.config(t, w.url, d.user, d.app)
	cfg.Store, cfg.Transport, cfg.Handler = fs, d.tr, d.handler()
	c, err := client.New(cfg)
	require.NoError(t, err, d.name)
	d.c, d.fs, d.r = c, fs, start(t, c, d.app)
}

func (d *rcDevice) down(t *testing.T) {
	t.Helper()
	require.NoError(t, d.r.stop(), d.name)
	require.NoError(t, d.fs.Close(), d.name)
	_, d.cursor = d.c.Position()
	d.r = nil
	d.offline++
}

// fanoutProcs is a world's fanout as `inboxd fanout` processes, one per
// server (each server's conversation stage, relay and user stage on
// several), like fanout/pipeline_test.go's TestFanoutKilledHard: static
// members, so that a process started after a SIGKILL resumes at once.
type fanoutProcs struct {
	t    *testing.T
	envs [][]string // by server
	cur  []*testenv.Proc
}

// start starts the processes; kill kills each with SIGKILL; up says
// whether they run.
func (f *fanoutProcs) start() {
	for _, env := range f.envs {
		f.cur = append(f.cur, testenv.Start(f.t, env, "fanout"))
	}
}

func (f *fanoutProcs) kill() {
	for _, p := range f.cur {
		p.Kill()
	}
	f.cur = nil
}

func (f *fanoutProcs) up() bool { return f.cur != nil }

// newFanoutProcs are env's fanout processes, not started: instance names
// their static memberships, extra adds settings (KEY=value).
func newFanoutProcs(t *testing.T, env *testenv.Env, instance string, extra ...string) *fanoutProcs {
	f := &fanoutProcs{t: t}
	for i := range env.Pools {
		f.envs = append(f.envs, append([]string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
			"INBOXD_TOPIC=" + env.Topic, "INBOXD_GROUP=fanout-" + env.Topic, fmt.Sprintf("INBOXD_INSTANCE_ID=%s-%d", instance, i+1),
			fmt.Sprintf("INBOXD_SHARD_SERVER=%d", i+1), "INBOXD_SESSION_TIMEOUT=6s", "INBOXD_HTTP_ADDR=127.0.0.1:0", "INBOXD_LOG_LEVEL=warn"},
			extra...))
	}
	return f
}

// stop stops each process cleanly, and says what failed with its output.
func (f *fanoutProcs) stop(timeout time.Duration) error {
	var errs []error
	for i, p := range f.cur {
		if err := p.Stop(timeout); err != nil {
			errs = append(errs, fmt.Errorf("fanout of server %d: %w\n%s", i+1, err, p.Output()))
		}
	}
	return errors.Join(errs...)
}

// procFanoutWorld is newWorld with the fanout in processes of its own.
func procFanoutWorld(t *testing.T, tweak func(*gateway.Config)) (*world, *fanoutProcs) {
	t.Helper()
	env := testenv.New(t, testenv.Options{})
	f := newFanoutProcs(t, env, "fanout-rand")
	f.start()

	return serveWorld(t, env, tweak, nil), f
}

// duplicator reads the log from its start and appends again a share of its
// send and change records, byte for byte (same key, value and headers:
// same event_id, msg_id and change_id), some at once and some later.
type duplicator struct {
	env      *testenv.Env
	rnd      *rand.Rand
	appended map[string]int // by event type
	changeID map[string]bool
}

var dupTypes = map[string]bool{events.MessageSent: true, events.MessageEdited: true, events.MessageDeleted: true,
	events.ReactionAdded: true, events.ReactionRemoved: true}

func (d *duplicator) run(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.env.Brokers...), kgo.ConsumeTopics(d.env.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	seen := map[string]bool{}
	var held []*kgo.Record
	var failed error
	dup := func(r *kgo.Record) {
		pctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
		if err := d.env.Producer.Client().ProduceSync(pctx, c).FirstErr(); err != nil {
			failed = errors.Join(failed, fmt.Errorf("append a duplicate: %w", err))
			return
		}
		if c.Partition != r.Partition {
			failed = errors.Join(failed, fmt.Errorf("duplicate of %s/%d landed in partition %d", r.Topic, r.Partition, c.Partition))
		}
		var e struct {
			Type     string `json:"type"`
			ChangeID string `json:"change_id"`
		}
		_ = json.Unmarshal(r.Value, &e)
		d.appended[e.Type]++
		if e.ChangeID != "" {
			d.changeID[e.ChangeID] = true
		}
	}
	for ctx.Err() == nil && failed == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachError(func(_ string, _ int32, err error) { failed = errors.Join(failed, fmt.Errorf("read the log: %w", err)) })
		fs.EachRecord(func(r *kgo.Record) {
			var e struct {
				Type    string `json:"type"`
				EventID string `json:"event_id"`
			}
			if json.Unmarshal(r.Value, &e) != nil || !dupTypes[e.Type] || seen[e.EventID] {
				return // a duplicate (ours, or a retry's) is not copied again
			}
			seen[e.EventID] = true
			switch x := d.rnd.Float64(); {
			case x < 0.2:
				dup(r)
			case x < 0.35:
				held = append(held, r)
			}
			if len(held) > 0 && d.rnd.IntN(6) == 0 {
				dup(held[0])
				held = held[1:]
			}
		})
	}
	for _, r := range held {
		dup(r)
	}
	return failed
}

// TestRandomChanges runs that workload; see the top of the file.
// INBOXD_TEST_SEED=n repeats the choices of a run (not its timing).
func TestRandomChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("a randomized workload with fanout processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("INBOXD_TEST_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (INBOXD_TEST_SEED=%d repeats its choices)", seed, seed)
	fail := func(format string, args ...any) { t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...) }
	rnd := rand.New(rand.NewPCG(seed, 0))
	noClientGoroutines(t)
	// A short ack wait, so that writes made while no fanout runs are
	// answered 202 (and tried again); polls as often as the workload needs,
	// so that only devices offline long enough fall past the small lag.
	w, fanout := procFanoutWorld(t, func(c *gateway.Config) {
		c.TooLongLag, c.AckWait, c.PollInterval = rcLag, 300*time.Millisecond, 100*time.Millisecond
	})
	ctx := context.Background()

	// Six users, each with an always-online device (the one that acts) and
	// users 1-3 with a second one that goes offline; half on WebSocket,
	// half polling.
	const users = 6
	dir := t.TempDir()
	var devs []*rcDevice
	actors := map[int64]*client.Client{}
	for u := int64(1); u <= users; u++ {
		trA, trB := client.TransportWebSocket, client.TransportPolling
		if u%2 == 0 {
			trA, trB = trB, trA
		}
		a := &rcDevice{name: fmt.Sprintf("user %d device A (%s)", u, trA), user: u, tr: trA,
			path: filepath.Join(dir, fmt.Sprintf("u%d-a", u), "state.json"), app: newApp()}
		a.up(t, w)
		actors[u] = a.c
		devs = append(devs, a)
		if u <= 3 {
			b := &rcDevice{name: fmt.Sprintf("user %d device B (%s)", u, trB), user: u, tr: trB,
				path: filepath.Join(dir, fmt.Sprintf("u%d-b", u), "state.json"), app: newApp()}
			b.up(t, w)
			devs = append(devs, b)
		}
	}
	b1, b2, b3 := devs[1], devs[3], devs[5]

	// Conversation i is created by user i, with user 1 (so that its device
	// B has enough to miss) and two or three others.
	convs := make([]*rcConv, rcConvs)
	for i := range convs {
		creator := int64(i + 1)
		var others []int64
		if creator != 1 {
			others = append(others, 1)
		}
		n := 2 + rnd.IntN(2)
		for _, v := range rnd.Perm(users) {
			if v := int64(v + 1); len(others) < n && v != creator && !slices.Contains(others, v) {
				others = append(others, v)
			}
		}
		id, err := actors[creator].CreateConversation(ctx, fmt.Sprintf("random %d", i), others...)
		require.NoError(t, err)
		cm := &rcConv{id: id, creator: creator, last: 1, joined: map[int64]int64{creator: 1}, msgs: map[int64]*rcMsg{}}
		for _, v := range others {
			cm.joined[v] = 1
		}
		convs[i] = cm
	}
	w.env.WaitCaughtUp(t, time.Minute)

	// The duplicator and the drivers.
	dctx, stopDup := context.WithCancel(ctx)
	dupr := &duplicator{env: w.env, rnd: rand.New(rand.NewPCG(seed, 1)), appended: map[string]int{}, changeID: map[string]bool{}}
	dupDone := make(chan error, 1)
	go func() { dupDone <- dupr.run(dctx) }()
	t.Cleanup(stopDup)

	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	var ops atomic.Int64
	drivers := make([]*rcDriver, rcConvs)
	errs := make(chan error, rcConvs)
	for i, cm := range convs {
		d := &rcDriver{w: w, cm: cm, rnd: rand.New(rand.NewPCG(seed, uint64(10+i))), actors: actors, kinds: map[string]int{}}
		drivers[i] = d
		go func() {
			for n := 0; n < rcOps; n++ {
				if err := d.step(wctx); err != nil {
					cancel() // the others stop too
					errs <- fmt.Errorf("conversation %d, operation %d: %w", cm.id, n, err)
					return
				}
				ops.Add(1)
			}
			errs <- nil
		}()
	}

	// The disruptions, by the number of operations done: fanout kills, and
	// devices B offline for a while: B1 until it is past the too-long lag,
	// B3 for about a third of the lag (it mostly catches up through sync).
	const total = rcConvs * rcOps
	var killAt []int64
	for i := int64(1); i <= rcKills; i++ {
		killAt = append(killAt, i*total/(rcKills+1)+rnd.Int64N(total/(rcKills+1)/2))
	}
	type window struct {
		d    *rcDevice
		from int64
		back func(n int64) bool
	}
	missed := func(d *rcDevice) int64 { return w.head(t, d.user) - d.cursor }
	windows := []window{
		{b1, total / 12, func(n int64) bool { return n >= total*55/100 && missed(b1) > rcLag+5 }},
		{b2, total / 4, func(n int64) bool { return n >= total*45/100 }},
		{b3, total / 2, func(int64) bool { return missed(b3) >= rcLag/3 }},
	}
	var kills, behind int
	var downUntil time.Time // while no fanout runs
	adm := kadm.NewClient(w.env.Producer.Client())
	done := 0
	var driverErr error
	for done < rcConvs {
		select {
		case err := <-errs:
			done++
			driverErr = errors.Join(driverErr, err)
			continue
		case <-time.After(10 * time.Millisecond):
		}
		n := ops.Load()
		if !fanout.up() && time.Now().After(downUntil) {
			fanout.start()
		}
		if fanout.up() && len(killAt) > 0 && n >= killAt[0] {
			killAt = killAt[1:]
			if ends, err := adm.ListEndOffsets(ctx, w.env.Topic); err == nil {
				var stored int64
				for _, pool := range w.env.Pools {
					var n int64
					_ = pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE topic = $1`, w.env.Topic).Scan(&n)
					stored += n
				}
				var end int64
				ends.Each(func(o kadm.ListedOffset) { end += o.Offset })
				if stored < end {
					behind++ // killed with records still to apply
				}
			}
			// Down for a moment: writes meanwhile wait, some past the
			// gateway's ack wait (202).
			fanout.kill()
			downUntil = time.Now().Add(time.Duration(200+rnd.IntN(600)) * time.Millisecond)
			kills++
		}
		for i := range windows {
			wd := &windows[i]
			switch {
			case wd.d.r != nil && wd.d.offline == 0 && n >= wd.from:
				wd.d.down(t)
			case wd.d.r == nil && wd.back(n):
				wd.d.up(t, w)
			}
		}
	}
	if driverErr != nil {
		fail("%v", driverErr)
	}
	stopDup()
	require.NoError(t, <-dupDone, "seed %d", seed)
	if !fanout.up() {
		fanout.start()
	}
	for _, d := range devs {
		if d.r == nil {
			d.up(t, w)
		}
	}
	w.env.WaitCaughtUp(t, 2*time.Minute)

	// Every device at its user's head, then every conversation backfilled.
	for _, d := range devs {
		converge(t, w, d.user, d.r, nil)
	}
	for _, d := range devs {
		for _, cm := range convs {
			if d.c.Conversation(cm.id) == nil {
				continue
			}
			for calls := 0; ; calls++ {
				res, err := d.c.Backfill(ctx, cm.id)
				require.NoError(t, err, "%s: backfill conversation %d", d.name, cm.id)
				if len(res.Remaining) == 0 {
					break
				}
				require.Less(t, calls, 100, "%s: backfill of conversation %d does not end: %v", d.name, cm.id, res.Remaining)
			}
		}
	}

	// The server: the invariants, the model's state, each change once.
	w.env.Verify(t)
	var changeIDs, noops []string
	var pending int
	kinds := map[string]int{}
	for _, d := range drivers {
		changeIDs = append(changeIDs, d.changes...)
		noops = append(noops, d.noops...)
		pending += d.pending
		for k, n := range d.kinds {
			kinds[k] += n
		}
	}
	// A change that changes nothing is answered by the gateway's check
	// (nothing appended) or, had it raced, by the projection: its
	// change_id may be in the table too, at the version it found.
	var rows, distinct, applied, noop, rejected int
	for _, pool := range w.env.Pools { // each conversation's changes are on its server
		var r, d, a, n, rj int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT change_id),
  count(*) FILTER (WHERE change_id = ANY($1::uuid[])), count(*) FILTER (WHERE change_id = ANY($2::uuid[])) FROM changes`,
			changeIDs, noops).Scan(&r, &d, &a, &n))
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM rejections`).Scan(&rj))
		rows, distinct, applied, noop, rejected = rows+r, distinct+d, applied+a, noop+n, rejected+rj
	}
	if rows != distinct || applied != len(changeIDs) || rows != applied+noop {
		fail("changes: %d rows, %d distinct change_ids, %d of the %d changes made, %d of the %d that changed nothing",
			rows, distinct, applied, len(changeIDs), noop, len(noops))
	}
	if rejected != 0 {
		fail("%d events rejected: the projection judged an allowed operation otherwise", rejected)
	}
	for _, cm := range convs {
		requireModel(t, w, cm, seed)
	}

	// Every device: its view of each conversation its user is or was a
	// member of is the history the server serves that user.
	tooLongs := map[string]int{}
	stale := 0
	for _, d := range devs {
		requireUpdatesAscending(t, d.app)
		d.app.mu.Lock()
		tl := len(d.app.tooLongs)
		d.app.mu.Unlock()
		tooLongs[d.name] = tl
		if tl == 0 {
			requireExactlyOnce(t, w, d.user, d.app.snapshot())
		} else {
			require.Empty(t, d.c.Holes(), d.name)
		}
		for _, cm := range convs {
			stale += requireDeviceView(t, w, d, cm.id, seed)
		}
	}
	b1.app.mu.Lock()
	b1TooLong := len(b1.app.tooLongs)
	b1.app.mu.Unlock()
	require.Positive(t, b1TooLong, "%s was offline past the too-long lag", b1.name)
	require.Positive(t, dupr.appended[events.MessageSent], "duplicated sends")
	dupChanges := len(dupr.changeID)
	require.Positive(t, dupChanges, "duplicated changes")
	for _, d := range devs {
		require.NoError(t, d.r.stop(), d.name)
	}
	require.NoError(t, fanout.stop(20*time.Second))
	// rcKills SIGKILLs of the fanout, then a clean stop of the last one.
	require.Equal(t, rcKills, kills)
	t.Logf("seed %d: %d operations %v (%d changes, %d changing nothing, %d answered 202 and retried); fanout killed %d times (%d with records still to apply); "+
		"duplicates appended %v (%d change_ids); too_long answers %v; %d messages of closed spans older on a device than on the server (changed after the removal)",
		seed, total, kinds, len(changeIDs), len(noops), pending, kills, behind, dupr.appended, dupChanges, tooLongs, stale)
}

// requireModel checks the conversation's messages in PostgreSQL against the
// model: last seq, every text message's body, deletion, version, reply and
// reactions (per user).
func requireModel(t *testing.T, w *world, cm *rcConv, seed uint64) {
	t.Helper()
	ctx := context.Background()
	var last int64
	require.NoError(t, w.env.ConvPool(cm.id).QueryRow(ctx, `SELECT last_seq FROM conversations WHERE id = $1`, cm.id).Scan(&last))
	require.Equal(t, cm.last, last, "seed %d: conversation %d's last seq", seed, cm.id)
	rows, err := w.env.ConvPool(cm.id).Query(ctx, `SELECT m.seq, m.sender_id, m.body, m.deleted, m.version, coalesce(m.reply_to, 0),
  coalesce((SELECT jsonb_object_agg(r.user_id::text, r.emoji) FROM reactions r WHERE r.conversation_id = m.conversation_id AND r.seq = m.seq), '{}')
FROM messages m WHERE m.conversation_id = $1 AND m.kind = 'text' ORDER BY m.seq`, cm.id)
	require.NoError(t, err)
	got := map[int64]rcMsg{}
	for rows.Next() {
		var s int64
		var m rcMsg
		var reactions map[string]string
		require.NoError(t, rows.Scan(&s, &m.sender, &m.text, &m.deleted, &m.version, &m.replyTo, &reactions))
		m.reactions = map[int64]string{}
		for u, e := range reactions {
			id, err := strconv.ParseInt(u, 10, 64)
			require.NoError(t, err)
			m.reactions[id] = e
		}
		got[s] = m
	}
	require.NoError(t, rows.Err())
	want := map[int64]rcMsg{}
	for s, m := range cm.msgs {
		want[s] = *m
	}
	require.Equal(t, want, got, "seed %d: conversation %d's text messages are the model's", seed, cm.id)
}

// requireDeviceView compares what device d was handed of conversation cid
// (its last state of each seq, from OnEntry, OnHistory and OnUpdate) with
// the history the server serves its user now.
//
// Messages of the user's current span of membership must be equal. Those
// of a closed span (before a removal) follow the rule of docs/decisions.md
// ("What a removed member sees"): the user's update entries stop with its
// removal while its history shows the messages as they are now, so the
// device's copy may be older than the server's, but never older than the
// last update entry its inbox got, never newer than the server's, and
// equal to it when the versions are.
// It returns how many messages of closed spans are older on the device.
func requireDeviceView(t *testing.T, w *world, d *rcDevice, cid int64, seed uint64) (stale int) {
	t.Helper()
	ctx := context.Background()
	type span struct{ from, to int64 } // to 0: current
	var spans []span
	rows, err := w.env.ConvPool(cid).Query(ctx, `SELECT joined_seq, coalesce(left_seq, 0) FROM member_spans
WHERE conversation_id = $1 AND user_id = $2 ORDER BY joined_seq`, cid, d.user)
	require.NoError(t, err)
	for rows.Next() {
		var s span
		require.NoError(t, rows.Scan(&s.from, &s.to))
		spans = append(spans, s)
	}
	require.NoError(t, rows.Err())
	if len(spans) == 0 {
		require.Nil(t, d.c.Conversation(cid), "%s knows conversation %d without ever being a member", d.name, cid)
		return 0
	}
	current := func(seq int64) bool {
		s := spans[len(spans)-1]
		return s.to == 0 && seq >= s.from
	}
	// The versions of the last update entries of each message in the user's inbox.
	floor := map[int64]int64{}
	rows, err = w.env.UserPool(d.user).Query(ctx, `SELECT seq, max(version) FROM inbox WHERE user_id = $1 AND conversation_id = $2 AND kind = 3 GROUP BY seq`, d.user, cid)
	require.NoError(t, err)
	for rows.Next() {
		var s, v int64
		require.NoError(t, rows.Scan(&s, &v))
		floor[s] = v
	}
	require.NoError(t, rows.Err())

	// The device's view. Each message is delivered once (OnEntry or
	// OnHistory) and each version handed over once, ascending; the one
	// exception the client's contract makes (Handler.OnUpdate, docs/client.md):
	// an update of a message in a history hole is handed to OnUpdate before
	// the message itself, which Backfill (or its entry) then hands over in
	// its current state, at least that version.
	view, bad := d.viewOf(cid, false)
	var server []client.Message
	for before := int64(0); ; {
		msgs, more, err := d.c.History(ctx, cid, before, 200)
		require.NoError(t, err)
		server = append(msgs, server...)
		if !more || len(msgs) == 0 {
			break
		}
		before = msgs[0].Seq
	}

	for _, sm := range server {
		dm, ok := view[sm.Seq]
		delete(view, sm.Seq)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("#%d missing: server %s", sm.Seq, describe(sm)))
		case current(sm.Seq) && describe(dm) != describe(sm):
			bad = append(bad, fmt.Sprintf("#%d (current span) device %s, server %s", sm.Seq, describe(dm), describe(sm)))
		case current(sm.Seq):
		case dm.CurrentVersion() < max(1, floor[sm.Seq]) || dm.CurrentVersion() > sm.CurrentVersion():
			bad = append(bad, fmt.Sprintf("#%d (closed span) device v%d outside [v%d, v%d]: device %s, server %s",
				sm.Seq, dm.CurrentVersion(), max(1, floor[sm.Seq]), sm.CurrentVersion(), describe(dm), describe(sm)))
		case dm.CurrentVersion() == sm.CurrentVersion() && describe(dm) != describe(sm):
			bad = append(bad, fmt.Sprintf("#%d (closed span) device %s, server %s", sm.Seq, describe(dm), describe(sm)))
		case dm.CurrentVersion() < sm.CurrentVersion():
			stale++
		}
	}
	for _, s := range slices.Sorted(maps.Keys(view)) {
		bad = append(bad, fmt.Sprintf("#%d not in the user's history: device %s", s, describe(view[s])))
	}
	if len(bad) > 0 {
		t.Errorf("seed %d: %s, conversation %d (spans %v): %d messages differ from the server's view:\n  %s",
			seed, d.name, cid, spans, len(bad), strings.Join(bad, "\n  "))
	}
	return stale
}
