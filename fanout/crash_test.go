package fanout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/producer"
	"github.com/inboxd/inboxd/projector"
)

// Crash recovery: how long the partitions of a fanout stay unprojected
// after a kill -9, with two `inboxd fanout` processes in one group. The
// group settings compared are env vars handed to the processes, so the
// harness measures whatever the binary built from this tree does; the
// figures are BenchmarkFanoutFailover's (kill_figures_test.go).

// killScenario is one run of kills against two fanout processes.
type killScenario struct {
	// Env is added to each process's environment; "{slot}" in a value
	// becomes the process slot (0 or 1), kept by a restarted process.
	// Variables the binary does not list in `inboxd fanout -h` are dropped
	// (and reported), so the harness never measures a setting that does
	// not exist.
	Env []string
	// Kills is the number of kill -9s, alternating between the slots.
	Kills int
	// Every is the minimum time between kills (and the time probes still
	// run after the last one); Jitter adds up to that much at random.
	Every, Jitter time.Duration
	// Restart starts a killed process again at once with the same slot
	// environment, as a container restart policy would. Without it only
	// one kill is allowed: the other process must take over.
	Restart bool
	// Deadline bounds the wait, after the probing ends, for every probe
	// to be projected; probes still unprojected then make the pauses
	// lower bounds.
	Deadline time.Duration
	// Seed of the kill jitter.
	Seed uint64
}

// killOutcome is what a killScenario measured.
type killOutcome struct {
	// Pauses has one entry per kill: the largest projection delay (append
	// acknowledged to last_seq seen in PostgreSQL) of the probes appended
	// from that kill until the next one (or the end of the probing).
	Pauses []time.Duration
	// Lower says some probes were never projected before the deadline:
	// their delay, and so the pauses, are lower bounds.
	Lower bool
	// Baseline is the largest projection delay of the probes acked from
	// two seconds to one second before the first kill, with both
	// processes running.
	Baseline time.Duration
	Probes   int
	// Problem is empty when everything was projected exactly once (each
	// conversation's last_seq is 1 + its probes, one text message per
	// probe, projector.Verify passes and the stored offsets reached the log
	// end); otherwise it says what is wrong.
	Problem string
	// MaxMembers and Unstable describe the group as DescribeGroups saw it
	// from the first kill on (classic protocol only).
	MaxMembers int
	Unstable   time.Duration
	// Dropped are env vars the binary does not support.
	Dropped []string
	// Notes counts notable fanout log lines (WARN/ERROR messages,
	// assignments, fencing) over every process.
	Notes map[string]int
	// Exits are processes that ended without being killed or stopped.
	Exits []string
	// Timeline lists the kills and, per probed partition, the stalls
	// (probes unprojected for over a second), in seconds from the first
	// kill.
	Timeline []string
}

func (o killOutcome) quantile(q float64) time.Duration {
	if len(o.Pauses) == 0 {
		return 0
	}
	s := slices.Clone(o.Pauses)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (o killOutcome) max() time.Duration { return slices.Max(append([]time.Duration{0}, o.Pauses...)) }

func (o killOutcome) summary() string {
	lb := ""
	if o.Lower {
		lb = ">="
	}
	return fmt.Sprintf("kills=%d p50=%s%v max=%s%v baseline=%v probes=%d max_members=%d unstable=%v",
		len(o.Pauses), lb, o.quantile(0.5).Round(10*time.Millisecond), lb, o.max().Round(10*time.Millisecond),
		o.Baseline.Round(time.Millisecond), o.Probes, o.MaxMembers, o.Unstable.Round(100*time.Millisecond))
}

func (o killOutcome) log(t testing.TB) {
	t.Helper()
	t.Logf("%s", o.summary())
	ps := make([]string, len(o.Pauses))
	for i, p := range o.Pauses {
		ps[i] = p.Round(10 * time.Millisecond).String()
	}
	t.Logf("pauses: %s", strings.Join(ps, " "))
	if len(o.Dropped) > 0 {
		t.Logf("env not supported by this binary, not passed: %v", o.Dropped)
	}
	keys := make([]string, 0, len(o.Notes))
	for k := range o.Notes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("fanout logs: %d× %s", o.Notes[k], k)
	}
	for _, line := range o.Timeline {
		t.Logf("timeline: %s", line)
	}
	for _, e := range o.Exits {
		t.Logf("fanout exited by itself: %s", e)
	}
	if o.Problem != "" {
		t.Logf("PROBLEM: %s", o.Problem)
	}
}

// With the binary's default group settings (no session timeout or instance
// id passed), the goal of fast failover: a kill -9 of one of two fanouts
// moves its partitions within 10 s; twenty kills with restarts, one every
// 3-4 s, never leave a partition unprojected for more than 15 s; nothing is
// lost or doubled. Against a real Kafka with INBOXD_TEST_KAFKA_BROKERS.
func TestFanoutKillsMoveQuickly(t *testing.T) {
	if testing.Short() {
		t.Skip("kills fanout processes for about two minutes")
	}
	t.Run("one kill, the other takes over", func(t *testing.T) {
		o := runKillScenario(t, killScenario{Kills: 1, Every: 5 * time.Second, Deadline: time.Minute, Seed: 1})
		o.log(t)
		require.Empty(t, o.Problem, "every probe projected exactly once, nothing lost or doubled")
		require.False(t, o.Lower, "every probe projected")
		require.LessOrEqual(t, o.Pauses[0], 10*time.Second, "partitions of the killed fanout resume within 10 s")
	})
	t.Run("twenty kills with restarts", func(t *testing.T) {
		o := runKillScenario(t, killScenario{Kills: 20, Every: 3 * time.Second, Jitter: time.Second, Restart: true,
			Deadline: time.Minute, Seed: 2})
		o.log(t)
		require.Empty(t, o.Problem, "every probe projected exactly once, nothing lost or doubled")
		require.False(t, o.Lower, "every probe projected")
		require.Len(t, o.Pauses, 20)
		require.LessOrEqual(t, o.max(), 15*time.Second, "no partition unprojected for more than 15 s")
	})
}

var (
	fanoutEnvOnce  sync.Once
	fanoutEnvNames map[string]bool
)

// supportedFanoutEnv returns the environment variables `inboxd fanout -h`
// lists in this tree's binary.
func supportedFanoutEnv(t testing.TB) map[string]bool {
	t.Helper()
	bin := testenv.Binary(t)
	fanoutEnvOnce.Do(func() {
		// -h ends with flag.ErrHelp, a non-zero exit: only the text counts.
		out, _ := exec.Command(bin, "fanout", "-h").CombinedOutput()
		fanoutEnvNames = map[string]bool{}
		for _, m := range regexp.MustCompile(`\(([A-Z][A-Z0-9_]+), default`).FindAllStringSubmatch(string(out), -1) {
			fanoutEnvNames[m[1]] = true
		}
	})
	require.True(t, fanoutEnvNames["INBOXD_KAFKA_BROKERS"] && fanoutEnvNames["INBOXD_GROUP"],
		"cannot read the fanout's env vars from `inboxd fanout -h`: %v", fanoutEnvNames)
	return fanoutEnvNames
}

// probeLog is the prober's and the watcher's shared record.
type probeLog struct {
	mu    sync.Mutex
	convs []int64               // one conversation per partition, probed
	part  map[int64]int32       // the partition of a probed conversation
	sent  map[int64][]time.Time // sent[c][i]: when probe i of c was appended
	acked map[int64][]time.Time // acked[c][i]: its acknowledgement (zero until then)
	seen  map[int64][]time.Time // seen[c][s]: when last_seq >= s was first seen
	err   error                 // first append error
	total int
}

// projectedAt is when probe i of c (seq i+2) was first seen projected.
func (l *probeLog) projectedAt(c int64, i int) time.Time {
	if s := l.seen[c]; len(s) > i+2 {
		return s[i+2]
	}
	return time.Time{}
}

// worst is the largest delay of the probes acknowledged in [from, to); a
// probe not projected counts until end and makes it a lower bound.
func (l *probeLog) worst(from, to, end time.Time) (d time.Duration, lower bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.convs {
		for i, a := range l.acked[c] {
			if a.IsZero() || a.Before(from) || !a.Before(to) {
				continue
			}
			p := l.projectedAt(c, i)
			if p.IsZero() {
				p, lower = end, true
			}
			d = max(d, p.Sub(a))
		}
	}
	return d, lower
}

// timeline describes the kills and the stalls of each partition, in
// seconds from the first kill.
func (l *probeLog) timeline(kills []time.Time, end time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	rel := func(at time.Time) string { return fmt.Sprintf("%+.1fs", at.Sub(kills[0]).Seconds()) }
	ks := make([]string, len(kills))
	for i, k := range kills {
		ks[i] = fmt.Sprintf("%d@%s", i%2, rel(k))
	}
	out := []string{"kills (slot@time): " + strings.Join(ks, " ")}
	for _, c := range l.convs {
		var stalls []string
		var from, to time.Time
		flush := func() {
			if !from.IsZero() {
				stalls = append(stalls, fmt.Sprintf("%s..%s (%.1fs)", rel(from), rel(to), to.Sub(from).Seconds()))
			}
			from = time.Time{}
		}
		for i, a := range l.acked[c] {
			if a.IsZero() {
				continue
			}
			p := l.projectedAt(c, i)
			if p.IsZero() {
				p = end
			}
			if p.Sub(a) <= time.Second {
				continue
			}
			if !from.IsZero() && a.After(to) {
				flush()
			}
			if from.IsZero() {
				from = a
			}
			if p.After(to) {
				to = p
			}
		}
		flush()
		if len(stalls) == 0 {
			stalls = []string{"none"}
		}
		out = append(out, fmt.Sprintf("partition %d stalled: %s", l.part[c], strings.Join(stalls, ", ")))
	}
	return out
}

// pending counts probes sent before t that are not yet projected.
func (l *probeLog) pending(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.convs {
		for i, s := range l.sent[c] {
			if s.Before(t) && l.projectedAt(c, i).IsZero() {
				n++
			}
		}
	}
	return n
}

// fanoutSlot is one of the two process places of a scenario.
type fanoutSlot struct {
	env    []string
	procs  []*testenv.Proc // every process started in this slot
	killed map[*testenv.Proc]bool
}

func (s *fanoutSlot) cur() *testenv.Proc { return s.procs[len(s.procs)-1] }

func (s *fanoutSlot) start(t testing.TB) {
	s.procs = append(s.procs, testenv.Start(t, s.env, "fanout"))
}

// runKillScenario runs sc against two fresh fanout processes over a fresh
// topic of 6 partitions and database, and returns the pauses. It fails the
// test only when the harness itself cannot run; what the fanouts get wrong
// is in the outcome.
func runKillScenario(t testing.TB, sc killScenario) killOutcome {
	t.Helper()
	require.Greater(t, sc.Kills, 0)
	require.True(t, sc.Restart || sc.Kills == 1, "without restarts only one kill leaves a fanout running")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "INBOXD_") && !strings.HasPrefix(k, "INBOXD_TEST_") {
			t.Logf("warning: %s is set in the test's environment and reaches the fanouts", k)
		}
	}
	const partitions = 6
	// One server whatever INBOXD_TEST_PG_SERVERS says: what is measured is
	// how fast one consumer group moves a killed member's partitions, which
	// each server's group does alike; the kills across servers are
	// TestShardedStagesKilledHard's.
	env := testenv.New(t, testenv.Options{Partitions: partitions, Servers: 1})
	ctx := testenv.Ctx(t, 30*time.Minute)
	var out killOutcome
	out.Notes = map[string]int{}

	// One conversation per partition; extra ones created on the way stay
	// unprobed (last_seq 1).
	l := &probeLog{part: map[int64]int32{}, sent: map[int64][]time.Time{}, acked: map[int64][]time.Time{}, seen: map[int64][]time.Time{}}
	var created []int64
	byPart := map[int32]bool{}
	for id := int64(1); len(byPart) < partitions; id++ {
		require.Less(t, id, int64(1000), "no conversation key lands on some partition")
		e := events.New(events.ConversationCreated, id, 1)
		e.Members = []int64{2}
		pos, err := env.Producer.Append(ctx, e)
		require.NoError(t, err)
		created = append(created, id)
		if !byPart[pos.Partition] {
			byPart[pos.Partition] = true
			l.convs = append(l.convs, id)
			l.part[id] = pos.Partition
		}
	}

	supported := supportedFanoutEnv(t)
	group := "crash-" + env.Topic
	slots := make([]*fanoutSlot, 2)
	for i := range slots {
		base := []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
			"INBOXD_TOPIC=" + env.Topic, "INBOXD_GROUP=" + group, "INBOXD_LOG_LEVEL=info",
			// A fixed port per slot, so that a restarted process keeps it.
			fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", testenv.FreePort(t))}
		s := &fanoutSlot{killed: map[*testenv.Proc]bool{}}
		for _, kv := range append(base, sc.Env...) {
			kv = strings.ReplaceAll(kv, "{slot}", fmt.Sprint(i))
			k, _, _ := strings.Cut(kv, "=")
			if !supported[k] {
				if i == 0 {
					out.Dropped = append(out.Dropped, k)
				}
				continue
			}
			s.env = append(s.env, kv)
		}
		slots[i] = s
	}

	// The watcher, the prober and the group observer, stopped and waited
	// for before this returns (or at the test's end on a failure).
	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(ctx)
	probeCtx, stopProbe := context.WithCancel(ctx)
	var stopOnce sync.Once
	stopAll := func() { stopOnce.Do(func() { stopProbe(); stopWatch(); wg.Wait() }) }
	t.Cleanup(stopAll)

	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			rows, err := env.Pool.Query(watchCtx, `SELECT id, last_seq FROM conversations`)
			if err == nil {
				now := time.Now()
				l.mu.Lock()
				for rows.Next() {
					var id, last int64
					if rows.Scan(&id, &last) != nil {
						break
					}
					for s := int64(len(l.seen[id])); s <= last; s++ {
						l.seen[id] = append(l.seen[id], now)
					}
				}
				l.mu.Unlock()
				rows.Close()
			}
			select {
			case <-watchCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	// The records of the probes carry a background context: stopping the
	// prober must not fail the appends already made.
	appendCtx := testenv.Ctx(t, 30*time.Minute)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-probeCtx.Done():
				return
			case <-tick.C:
			}
			for _, c := range l.convs {
				e := events.New(events.MessageSent, c, 1)
				e.MsgID = uuid.NewString()
				e.Body = events.Ptr("probe")
				l.mu.Lock()
				i := len(l.sent[c])
				l.sent[c] = append(l.sent[c], time.Now())
				l.acked[c] = append(l.acked[c], time.Time{})
				l.total++
				l.mu.Unlock()
				env.Producer.AppendAsync(appendCtx, e, func(_ producer.Position, err error) {
					now := time.Now()
					l.mu.Lock()
					defer l.mu.Unlock()
					if err != nil && l.err == nil {
						l.err = fmt.Errorf("probe %d of conversation %d: %w", i, c, err)
					}
					l.acked[c][i] = now
				})
			}
		}
	}()

	type groupSample struct {
		at      time.Time
		state   string
		members int
	}
	var gmu sync.Mutex
	var samples []groupSample
	adm := kadm.NewClient(env.Producer.Client())
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			dctx, cancel := context.WithTimeout(watchCtx, 2*time.Second)
			gs, err := adm.DescribeGroups(dctx, group)
			cancel()
			if err == nil {
				if g, ok := gs[group]; ok && g.Err == nil {
					gmu.Lock()
					samples = append(samples, groupSample{time.Now(), g.State, len(g.Members)})
					gmu.Unlock()
				}
			}
			select {
			case <-watchCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	for _, s := range slots {
		s.start(t)
	}
	for i, s := range slots {
		require.NoError(t, s.cur().WaitOutput("partitions assigned", 2*time.Minute), "fanout %d never got partitions", i)
	}
	// Warm: both members in and, for two seconds in a row, every probe
	// projected within half a second and the group (when DescribeGroups
	// knows it: classic protocol) stable with two members, so that no
	// rebalance of the start is still under way at the first kill.
	warmBy := time.Now().Add(2 * time.Minute)
	var calm time.Time
	for {
		now := time.Now()
		ok := l.pending(now.Add(-500*time.Millisecond)) == 0
		gmu.Lock()
		if n := len(samples); n > 0 {
			last := samples[n-1]
			ok = ok && last.state == "Stable" && last.members == 2
		}
		gmu.Unlock()
		if !ok {
			calm = time.Time{}
		} else if calm.IsZero() {
			calm = now
		}
		if !calm.IsZero() && now.Sub(calm) >= 2*time.Second {
			break
		}
		require.True(t, now.Before(warmBy), "probes not projected or group not stable before the first kill")
		time.Sleep(50 * time.Millisecond)
	}
	warm := time.Now()
	rnd := rand.New(rand.NewPCG(sc.Seed, sc.Seed))
	next := warm.Add(2 * time.Second)
	var kills []time.Time
	for k := 0; k < sc.Kills; k++ {
		time.Sleep(time.Until(next))
		s := slots[k%2]
		p := s.cur()
		if p.Exited() {
			t.Logf("kill %d: fanout %d had already exited", k, k%2)
		}
		kills = append(kills, time.Now())
		p.Kill()
		s.killed[p] = true
		if sc.Restart {
			s.start(t)
		}
		next = kills[k].Add(sc.Every)
		if sc.Jitter > 0 {
			next = next.Add(time.Duration(rnd.Int64N(int64(sc.Jitter))))
		}
	}
	time.Sleep(time.Until(next))
	stopProbe()
	probeEnd := time.Now()
	require.NoError(t, env.Producer.Flush(ctx))
	l.mu.Lock()
	appendErr := l.err
	out.Probes = l.total
	l.mu.Unlock()
	require.NoError(t, appendErr, "the probes must all be appended for their seqs to be known")

	// Every probe projected, or the deadline.
	deadline := time.Now().Add(sc.Deadline)
	for l.pending(probeEnd) > 0 && time.Now().Before(deadline) {
		time.Sleep(25 * time.Millisecond)
	}
	end := time.Now()
	if n := l.pending(probeEnd); n > 0 {
		out.Problem = fmt.Sprintf("%d probes not projected %v after the probing ended", n, sc.Deadline)
	}
	// The last second before the first kill is left out: a probe acked
	// just before it may die unprojected with the killed process.
	out.Baseline, _ = l.worst(warm, kills[0].Add(-time.Second), end)
	out.Timeline = l.timeline(kills, end)
	for k, at := range kills {
		to := probeEnd
		if k+1 < len(kills) {
			to = kills[k+1]
		}
		d, lower := l.worst(at, to, end)
		out.Pauses = append(out.Pauses, d)
		out.Lower = out.Lower || lower
	}

	gmu.Lock()
	for i, s := range samples {
		if s.at.Before(kills[0]) {
			continue
		}
		out.MaxMembers = max(out.MaxMembers, s.members)
		if s.state != "Stable" && i > 0 {
			out.Unstable += s.at.Sub(samples[i-1].at)
		}
	}
	gmu.Unlock()

	// The end: offsets at the log end, every process stopped, then the
	// projections checked against what was appended.
	if out.Problem == "" {
		if err := testenv.WaitCaughtUp(ctx, env.Pool, env.Producer, time.Minute); err != nil {
			out.Problem = err.Error()
		}
	}
	for i, s := range slots {
		if p := s.cur(); !p.Exited() {
			if err := p.Stop(30 * time.Second); err != nil {
				t.Logf("fanout %d at SIGTERM: %v", i, err)
				out.Notes["SIGTERM: "+err.Error()]++
			}
			s.killed[p] = true
		}
	}
	stopAll()
	for i, s := range slots {
		for _, p := range s.procs {
			for k, n := range logNotes(p.Output()) {
				out.Notes[k] += n
			}
			if !s.killed[p] && p.Exited() {
				o := p.Output()
				out.Exits = append(out.Exits, fmt.Sprintf("slot %d: %s", i, o[max(0, len(o)-2000):]))
			}
		}
	}
	if out.Problem == "" {
		out.Problem = checkProbes(ctx, env.Pool, l, created)
	}
	return out
}

// checkProbes says what is wrong with the projections of the probes, or "".
func checkProbes(ctx context.Context, pool *pgxpool.Pool, l *probeLog, created []int64) string {
	var problems []string
	want := map[int64]int64{}
	for _, c := range created {
		want[c] = 1
	}
	l.mu.Lock()
	for _, c := range l.convs {
		want[c] = 1 + int64(len(l.sent[c]))
	}
	total := l.total
	l.mu.Unlock()
	got := map[int64]int64{}
	rows, err := pool.Query(ctx, `SELECT id, last_seq FROM conversations`)
	if err != nil {
		return fmt.Sprintf("read conversations: %v", err)
	}
	for rows.Next() {
		var id, seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			rows.Close()
			return fmt.Sprintf("read conversations: %v", err)
		}
		got[id] = seq
	}
	rows.Close()
	for c, w := range want {
		if got[c] != w {
			problems = append(problems, fmt.Sprintf("conversation %d: last_seq %d, want %d", c, got[c], w))
		}
	}
	if len(got) != len(want) {
		problems = append(problems, fmt.Sprintf("%d conversations, want %d", len(got), len(want)))
	}
	var texts int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE kind = 'text'`).Scan(&texts); err != nil {
		problems = append(problems, fmt.Sprintf("count messages: %v", err))
	} else if texts != total {
		problems = append(problems, fmt.Sprintf("%d text messages, want %d (one per probe)", texts, total))
	}
	rep, err := projector.Verify(ctx, pool)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("verify: %v", err))
	case !rep.OK():
		problems = append(problems, "verify: "+rep.String())
	}
	return strings.Join(problems, "; ")
}

var logLine = regexp.MustCompile(`level=(WARN|ERROR) msg=("[^"]*"|\S+)`)

// logNotes counts the notable lines of a fanout's output.
func logNotes(out string) map[string]int {
	n := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		if m := logLine.FindStringSubmatch(line); m != nil {
			n[m[1]+" "+strings.Trim(m[2], `"`)]++
		}
		if strings.Contains(line, `msg="partitions assigned"`) {
			n["INFO partitions assigned"]++
		}
		if strings.Contains(line, `msg="partitions revoked"`) {
			n["INFO partitions revoked"]++
		}
		if strings.Contains(line, "FENCED_INSTANCE_ID") {
			n["FENCED_INSTANCE_ID (any line)"]++
		}
	}
	return n
}
