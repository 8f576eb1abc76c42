package bench

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/projector"
)

// envChild marks a run of this test binary as a child of a bench (the
// server under test or a load generator), as `inboxd-bench serve|worker`.
const envChild = "INBOXD_BENCH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := RunChild(ctx, os.Args[1:])
		stop()
		if err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	pgtest.Main(m)
}

// syncWriter lets the children's goroutines write progress into one buffer.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func testEnv(t *testing.T) (*Env, *syncWriter) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	var progress syncWriter
	env, err := NewEnv(context.Background(), EnvConfig{DatabaseURL: pgtest.AdminURL(t), OutDir: t.TempDir(),
		Runner: &Runner{Exe: exe, Env: []string{envChild + "=1"}}, Progress: &progress})
	require.NoError(t, err)
	t.Cleanup(env.Close)
	return env, &progress
}

// The whole suite at a tiny size, with the report and the charts: every
// figure comes out next to its reference. A check that the suite works,
// not a measurement (`inboxd-bench all` is that).
func TestBenchAllSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dozen processes")
	}
	env, progress := testEnv(t)
	dir := t.TempDir()
	doc := filepath.Join(dir, "benchmarks.md")
	require.NoError(t, os.WriteFile(doc, []byte("# hand\n"+markBegin+"\nold\n"+markEnd+"\nprose\n"+markProfilesBegin+"\n"+markProfilesEnd+"\n"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := All(ctx, env, AllConfig{
		Fanout7:  FanoutConfig{Messages: 2000, Conversations: 200},
		Fanout50: FanoutConfig{Messages: 300, Conversations: 40},
		E2E: E2EConfig{Conversations: 15, Loads: []float64{50, 200}, WSLoads: []float64{200}, PhaseSeconds: 1.5, RampSeconds: 1,
			RampSteps: 1, DrainSeconds: 1},
		Sync:   SyncConfig{Users: 100, Messages: 10, Seconds: 1, Conns: 4},
		Idle:   IdleConfig{Conns: 300, Workers: 2, Settle: 0.2},
		Storm:  StormConfig{Clients: 100, Hold: 2200 * time.Millisecond, KillHold: 2200 * time.Millisecond, Down: 300 * time.Millisecond, Tail: 300 * time.Millisecond, RecoverTimeout: 20 * time.Second},
		Docs:   doc,
		Images: dir,
	})
	t.Log(progress.String())
	require.NoError(t, err)

	require.True(t, res.Fanout7.VerifyOK)
	require.Equal(t, int64(2000*7), res.Fanout7.InboxRows)
	require.Positive(t, res.Fanout7.Ratio)
	require.Positive(t, res.Fanout7.ReplayRatio)
	require.Equal(t, int64(300*50), res.Fanout50.InboxRows)
	require.Len(t, res.E2E.Phases[:2], 2)
	stages := []string{"gateway check", "gateway append", "gateway projection", "fanout queued", "fanout committed"}
	for _, p := range append(append([]E2EPhase(nil), res.E2E.Phases...), res.E2E.WSPhases...) {
		require.Positive(t, p.Push.N, p.Name)
		require.Positive(t, p.Commit.N, p.Name)
		// Where the sends' time went: every stage observed in the phase.
		var got []string
		for _, st := range p.Stages {
			got = append(got, st.Stage)
			require.Positive(t, st.N, "%s: %s", p.Name, st.Stage)
			require.LessOrEqual(t, st.P50, st.P99, "%s: %s", p.Name, st.Stage)
		}
		require.Equal(t, stages, got, p.Name)
	}
	require.NotEmpty(t, res.E2E.CPU)
	// The WebSocket sends (one fixed load here): every send answered by
	// its send_ack, every push timed, and the CPU per message of both.
	require.Len(t, res.E2E.WSPhases, 1)
	for _, p := range res.E2E.WSPhases {
		require.Equal(t, transportWS, p.Transport)
		require.Zero(t, p.SendErrors, "%s: %s", p.Name, p.FirstErrText)
		require.Positive(t, p.Send.N, p.Name)
		require.Positive(t, p.Push.N, p.Name)
		require.Positive(t, p.Commit.N, p.Name)
	}
	require.Positive(t, res.E2E.CPUMessages)
	require.Positive(t, res.E2E.CPUWSMessages)
	require.NotEmpty(t, res.E2E.CPUWS)
	// Every goal is computed from this run, the run-to-run
	// range aside (it needs several runs) and the CPU per message when
	// PostgreSQL is not the run's own server.
	for _, g := range goalsOf(res) {
		known := g.ID != spreadGoalID && (env.PGData != "" || !strings.HasPrefix(g.ID, "cpu-"))
		require.Equal(t, known, g.Known, "%s: %s", g.ID, g.Why)
	}
	require.Positive(t, res.Sync.Page.PerSec)
	require.Positive(t, res.Sync.NotModified.PerSec)
	require.Positive(t, res.Sync.Trivial.PerSec)
	require.Zero(t, res.Sync.Page.BadPages)
	require.Equal(t, 300, res.Idle.Gateway.Held)
	require.Equal(t, 300, res.Idle.Echo.Held)
	require.Positive(t, res.Idle.Gateway.RSSPerConn)
	require.Len(t, res.Storm.Runs, 5)
	for _, r := range res.Storm.Runs {
		require.Equal(t, 100, r.ConnectedAtCut, r.Mode)
		require.Positive(t, r.PeakPerSec, r.Mode)
	}
	for _, row := range res.Rows() {
		require.NotEmpty(t, row.Reference, row.Figure)
		require.NotEmpty(t, row.Ratio, row.Figure)
	}

	raw, err := os.ReadFile(doc)
	require.NoError(t, err)
	report := string(raw)
	require.True(t, strings.HasPrefix(report, "# hand\n"+markBegin))
	require.NotContains(t, report, "\nold\n")
	require.Contains(t, report, "\nprose\n")
	require.Contains(t, report, "sync pages/s")
	require.Contains(t, report, "#### Goals\n")
	require.Contains(t, report, "WebSocket send frame -> WebSocket push at 200 msg/s")
	require.Contains(t, report, "CPU per message, WebSocket sends at 200 msg/s")
	require.Contains(t, report, "naive/SDK")
	for _, c := range []string{"e2e-latency.png", "storm-requests.png", "storm-connected.png"} {
		require.FileExists(t, filepath.Join(dir, c))
		require.Contains(t, report, "("+c+")")
	}
	var out bytes.Buffer
	WriteTable(&out, res.Rows())
	t.Log("\n" + out.String())
}

// The generated inbox is what the fanout would have projected: every
// invariant holds on it.
func TestSyncDataInvariants(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	ctx := context.Background()
	d, err := generateSyncData(ctx, pool, 60, 7, 9, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2*7+9*7), d.Head)
	rep, err := projector.Verify(ctx, pool)
	require.NoError(t, err)
	var b bytes.Buffer
	rep.Print(&b)
	require.True(t, rep.OK(), b.String())
	require.Equal(t, d.Rows, rep.InboxRows)
	var heads []int64
	rows, err := pool.Query(ctx, `SELECT DISTINCT inbox_seq FROM users`)
	require.NoError(t, err)
	for rows.Next() {
		var h int64
		require.NoError(t, rows.Scan(&h))
		heads = append(heads, h)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{d.Head}, heads)
}

func TestReplaceBlock(t *testing.T) {
	doc := []byte("a\n<!-- x -->\nold\nlines\n<!-- /x -->\nb\n")
	out, err := replaceBlock(doc, "<!-- x -->", "<!-- /x -->", "\nnew\n\n")
	require.NoError(t, err)
	require.Equal(t, "a\n<!-- x -->\nnew\n<!-- /x -->\nb\n", string(out))
	_, err = replaceBlock([]byte("no markers"), "<!-- x -->", "<!-- /x -->", "new")
	require.Error(t, err)
}

func TestMergeStorm(t *testing.T) {
	cut := time.UnixMilli(10_000)
	run := StormRun{}
	mergeStorm(&run, cut, []stormSeries{
		{StartMS: 8_000, BucketMS: 100, Attempts: make([]int32, 50), Connected: make([]int32, 50), RecoveredMS: 11_000},
		{StartMS: 8_050, BucketMS: 100, Attempts: make([]int32, 50), Connected: make([]int32, 50), RecoveredMS: 11_500},
	})
	require.InDelta(t, 1.5, run.RecoverSeconds, 1e-9)
	require.Equal(t, -1.0, run.T[0])
	// One bucket per 100 ms on both sides of the cut, even when the
	// workers' buckets straddle it: no bucket counted twice.
	run = StormRun{}
	att := make([]int32, 40)
	conn := make([]int32, 40)
	for i := range att {
		att[i], conn[i] = 1, 1
	}
	mergeStorm(&run, cut, []stormSeries{{StartMS: 8_050, BucketMS: 100, Attempts: att, Connected: conn}})
	for i, c := range run.Connected {
		require.LessOrEqual(t, c, 1, "bucket %d (t=%.1f)", i, run.T[i])
	}
	require.Equal(t, int64(-1), floorDiv(-50, 100))
	require.Equal(t, int64(0), floorDiv(50, 100))
	require.Equal(t, int64(-1), floorDiv(-100, 100))
}

// The changes figure at a tiny size, through `all --only changes`: the
// edits are timed on the other members' WebSockets next to sends, the
// reaction burst is applied in full and the projection verifies. A check
// that the figure works, not a measurement.
func TestBenchChangesSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway and a load generator")
	}
	env, progress := testEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := All(ctx, env, AllConfig{Only: []string{"changes"}, Changes: ChangesConfig{
		Conversations: 10, Rate: 50, Seconds: 1, WarmupSeconds: 0.5, DrainSeconds: 2,
		ReactionMembers: 40, ReactionRate: 200, ReactionSeconds: 1}})
	t.Log(progress.String())
	require.NoError(t, err)
	require.Nil(t, res.E2E, "only the changes figure ran")
	c := res.Changes
	require.NotNil(t, c)
	require.Equal(t, 70, c.Connections)
	for _, p := range []ChangesPhase{c.Send, c.Edit} {
		require.Positive(t, p.Push.N, p.Name)
		require.Zero(t, p.Errors, "%s: %s", p.Name, p.FirstErr)
		require.Equal(t, p.Expected, p.Received, p.Name)
	}
	require.True(t, c.EditVerifyOK)
	x := c.Reactions
	require.True(t, x.VerifyOK)
	require.Positive(t, x.Appended)
	require.Equal(t, x.Appended, x.Applied)
	require.Positive(t, x.UpdateEntries)
	require.LessOrEqual(t, x.UpdateEntries, x.Applied*int64(x.Members), "at most one entry per member per reaction")
	rows := res.Rows()
	require.Len(t, rows, 4)
	for _, row := range rows {
		require.NotEmpty(t, row.Reference, row.Figure)
		require.NotEmpty(t, row.Ratio, row.Figure)
	}
	var out bytes.Buffer
	WriteTable(&out, rows)
	t.Log("\n" + out.String())
}

// The large figure at a tiny size, through `all --only large` (a low
// read fan-out threshold so that the build is short): the conversation
// switches to read mode, every connected member gets every message once
// and in order, its messages write no inbox row per member, the offline
// member catches up and both syncs are timed. A check that the figure
// works, not a measurement.
func TestBenchLargeSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway and three load generators")
	}
	env, progress := testEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := All(ctx, env, AllConfig{Only: []string{"large"}, Large: LargeConfig{
		Members: 1200, Connected: 150, Rate: 40, Seconds: 1.5, Small: 20, SmallRate: 20, Senders: 5,
		Channels: 5, SyncRequests: 20, DrainSeconds: 10, Partitions: 4, LargeThreshold: 100}})
	t.Log(progress.String())
	require.NoError(t, err)
	require.Nil(t, res.E2E, "only the large figure ran")
	l := res.Large
	require.NotNil(t, l)
	require.True(t, l.ReadFanout)
	require.Equal(t, int64(1200), l.MemberCount)
	require.Equal(t, 170, l.Connections)
	require.Len(t, l.Phases, 2)
	ref, lg := l.Phases[0], l.Phases[1]
	require.Zero(t, ref.Send.LargeSent)
	require.Positive(t, lg.Send.LargeOK)
	require.Zero(t, lg.Send.Errors, lg.Send.FirstErr)
	require.Equal(t, lg.LargeExpected, lg.LargeReceived)
	require.Positive(t, lg.LargePush.N)
	require.Positive(t, ref.SmallPush.N)
	require.Positive(t, lg.SmallPush.N)
	d := l.Delivery
	require.Equal(t, 150, d.Large.Sessions)
	require.Equal(t, 150, d.Large.Complete)
	require.Zero(t, d.Large.Missing)
	require.Equal(t, 20, d.Small.Complete)
	require.LessOrEqual(t, lg.LargeRows, lg.Send.LargeOK, "the bound: no row per member")
	require.True(t, l.Offline.Listed)
	require.True(t, l.Offline.Contiguous)
	require.Equal(t, lg.Send.LargeOK, l.Offline.Bench)
	require.Equal(t, 5, l.SyncListed)
	require.Equal(t, 20, l.SyncWith.N)
	require.Equal(t, 20, l.SyncWithout.N)
	rows := res.Rows()
	require.GreaterOrEqual(t, len(rows), 8)
	for _, row := range rows {
		require.NotEmpty(t, row.Reference, row.Figure)
		require.NotEmpty(t, row.Ratio, row.Figure)
	}
	var out bytes.Buffer
	WriteTable(&out, rows)
	t.Log("\n" + out.String())
}

// The shards figure at a tiny size: both runs verify (each server by
// itself and the crossing), some entries cross, and every row has its
// reference. A check that the figure works, not a measurement.
func TestBenchShardsSmoke(t *testing.T) {
	env, _ := testEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Shards(ctx, env, ShardsConfig{Messages: 300, Conversations: 40, Rates: []int{50}, PacedFor: time.Second})
	require.NoError(t, err)
	require.Len(t, res.Paced, 1)
	require.Positive(t, res.Paced[0].OneP50Ms)
	require.Positive(t, res.Paced[0].LocalP50Ms)
	require.Positive(t, res.Paced[0].CrossedP50Ms)
	require.Positive(t, res.Paced[0].OnePushP50Ms, "the sample's pushes reached the WebSocket on 1 server")
	require.Positive(t, res.Paced[0].LocalPushP50Ms)
	require.Positive(t, res.Paced[0].CrossedPushP50Ms, "and the crossed member's on 2")
	require.True(t, res.VerifyOK)
	require.True(t, res.CrossingChecked)
	require.Greater(t, res.CrossedShare, 0.0)
	require.Less(t, res.CrossedShare, 1.0)
	require.Positive(t, res.OneRowsPerSec)
	require.Positive(t, res.TwoRowsPerSec)
	require.Positive(t, res.CrossedP50Ms)
	for _, r := range res.Rows() {
		require.NotEmpty(t, r.Value, r.Figure)
		require.NotEmpty(t, r.Reference, r.Figure)
	}
}

// The attachments figure at a tiny size: the files go up sealed, are sent,
// and the one downloaded opens to what was uploaded; every photo's
// thumbnail is made once and announced once, on both gateways, and the
// one downloaded opens to what was announced. A check that the figure
// works, not a measurement.
func TestAttachmentsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts SeaweedFS and two gateway processes")
	}
	env, progress := testEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Attachments(ctx, env, AttachmentsConfig{Files: 6, Size: 100_000, Concurrency: 2,
		Images: 5, Lone: 2, ImageWidth: 800, ImageHeight: 600, ImageSize: 150_000})
	require.NoError(t, err, progress.String())
	require.True(t, res.Downloaded)
	require.Equal(t, 6, res.EndToEnd.N)
	require.Equal(t, 6, res.PlainPut.N)
	require.Positive(t, res.GatewayCPUPerUpload)

	th := res.Thumbnails
	require.Equal(t, 5, th.Images)
	require.Equal(t, 5, th.Announced, "every photo of the burst announced")
	require.Equal(t, 5, th.Updates, "each by one update entry")
	require.Equal(t, 5+2+2, th.Done, "every photo of every phase made, in the store of record")
	require.Zero(t, th.Reconns)
	require.Equal(t, 5, th.Latency.N)
	require.Equal(t, 2, th.Lone.N)
	require.Equal(t, 2, th.LoneShort.N)
	require.Positive(t, th.PerSec)
	require.Positive(t, th.Spacing)
	require.Positive(t, th.RefPerSec)
	require.Positive(t, th.RefCPU)
	require.Positive(t, th.Latency.P50)
	require.Positive(t, th.LoneShort.P50)
	require.Positive(t, th.GatewayCPUPerThumb)
	require.Equal(t, 320, th.ThumbWidth)
	require.Equal(t, 240, th.ThumbHeight)
	require.Positive(t, th.ThumbBytes)
	require.Equal(t, 1000.0, th.Interval)
	require.Equal(t, 50.0, th.ShortInterval)

	rows := res.Rows()
	require.Len(t, rows, 9)
	for _, row := range rows {
		require.NotEmpty(t, row.Reference, row.Figure)
		require.NotEmpty(t, row.Ratio, row.Figure)
	}
	var out bytes.Buffer
	WriteTable(&out, rows)
	t.Log("\n" + out.String())
}
