package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/bench"
	"github.com/inboxd/inboxd/internal/config"
)

// runFunc runs a figure on the environment of the run.
type runFunc func(ctx context.Context, env *bench.Env) (bench.Result, error)

// figure is one command of inboxd-bench: bind adds its flags to fs and
// returns the run, which reads them once fs is parsed.
type figure struct {
	summary string
	bind    func(fs *flag.FlagSet) runFunc
}

var figures = map[string]figure{
	"fanout":      {"committed inbox rows/s vs a plain COPY of the same rows; idle latency; replay vs live", bindFanout},
	"e2e":         {"send -> WebSocket push latency at fixed loads (sends over HTTP, then over the WebSocket) and the highest sustained one, vs commit latency; CPU per message", bindE2E},
	"sync":        {"sync pages/s and 304s/s over a large inbox vs a trivial handler on the same server", bindSync},
	"idle":        {"bytes per idle WebSocket of the gateway vs a bare gorilla/websocket echo server", bindIdle},
	"storm":       {"request rate during a reconnect storm, the SDK vs a naive client", bindStorm},
	"changes":     {"edit -> WebSocket push latency vs a send's; update entries written for a burst of reactions on one message", bindChanges},
	"large":       {"read fan-out: build of an N-member conversation, push latency to C connected members, small conversations' p99 with and without it, inbox rows per message, catch-up, sync cost of 50 channels", bindLarge},
	"attachments": {"upload + send of a file end to end vs a plain PUT of the same bytes to the same store (SeaweedFS); the gateway's CPU and memory per upload; thumbnails/s of photos and a thumbnail's latency vs the same image work in the bench", bindAttachments},
	"shards":      {"sharded projection on 2 servers: committed inbox rows/s vs 1 server, the share of entries that crossed, and append -> commit on the user's server and -> push on the member's WebSocket for a crossed member vs a local one, at paced loads", bindShards},
	"search":      {"GET /v1/search latency by kind of query over 1M messages vs a SELECT of as many rows by primary key; the index's size; the fanout's messages/s with and without the search column and index", bindSearch},
	"all":         {"every figure, then the goals (computed from the results), the tables and charts of docs/benchmarks.md", bindAll},
}

func bindFanout(fs *flag.FlagSet) runFunc {
	var c bench.FanoutConfig
	fs.IntVar(&c.Messages, "messages", 100000, "messages to append")
	fs.IntVar(&c.Members, "members", 7, "members per conversation")
	fs.IntVar(&c.Conversations, "conversations", 2000, "conversations")
	fs.IntVar(&c.Partitions, "partitions", 12, "topic partitions")
	fs.IntVar(&c.MaxPollRecords, "max-poll-records", 5000, "fanout batch size")
	fs.BoolVar(&c.SkipReplay, "skip-replay", false, "leave out the replay figure")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		return bench.Fanout(ctx, env, c)
	}
}

func bindShards(fs *flag.FlagSet) runFunc {
	var c bench.ShardsConfig
	fs.IntVar(&c.Messages, "messages", 40000, "messages to append (in each run)")
	fs.IntVar(&c.Members, "members", 7, "members per conversation")
	fs.IntVar(&c.Conversations, "conversations", 1000, "conversations")
	fs.IntVar(&c.Partitions, "partitions", 4, "topic partitions (the odd ones on server 2)")
	var rates string
	fs.StringVar(&rates, "rates", "100,1000", "paced loads, msg/s, at which an entry's latency is measured on 1 and 2 servers")
	fs.DurationVar(&c.PacedFor, "paced-for", 10*time.Second, "length of each paced load")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		for _, r := range strings.Split(rates, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(r))
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("--rates: %q is not a positive rate", r)
			}
			c.Rates = append(c.Rates, n)
		}
		return bench.Shards(ctx, env, c)
	}
}

func bindE2E(fs *flag.FlagSet) runFunc {
	var c bench.E2EConfig
	var loads, wsLoads string
	fs.IntVar(&c.Conversations, "conversations", 300, "conversations, each of its own members (one WebSocket per member)")
	fs.IntVar(&c.Members, "members", 7, "members per conversation")
	fs.StringVar(&loads, "loads", "100,1000", "fixed offered loads with the sends over HTTP, msg/s; the ramp starts from the last")
	fs.StringVar(&wsLoads, "ws-loads", "", "fixed offered loads with the sends over the WebSocket (a send frame on the sender's own socket, answered by send_ack), msg/s, after the HTTP ones (empty: the same as --loads; none: no WebSocket sends)")
	fs.Float64Var(&c.PhaseSeconds, "phase-seconds", 10, "length of a fixed load")
	fs.Float64Var(&c.RampSeconds, "ramp-seconds", 4, "length of a ramp step")
	fs.IntVar(&c.RampSteps, "ramp-steps", 6, "most ramp steps (0: no ramp; the highest sustained load is then the highest fixed one)")
	fs.Float64Var(&c.MaxP99Ms, "max-p99-ms", 500, "push p99 above which a load is not sustained")
	fs.BoolVar(&c.Profile, "profile", true, "take CPU profiles during the last fixed load")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", 0, "the gateway's PostgreSQL pool size (0: as inboxd gateway, max(16, cores))")
	fs.IntVar(&c.SendCheckBatch, "send-check-batch", 0, "the gateway's --send-check-batch (0: as inboxd gateway; 1: each check commits alone)")
	fs.IntVar(&c.SendCheckRunners, "send-check-runners", 0, "the gateway's --send-check-runners (0: as inboxd gateway)")
	fs.IntVar(&c.ApplyWorkers, "apply-workers", 0, "the fanout's --apply-workers (0: as inboxd fanout)")
	fs.IntVar(&c.ConversationCache, "conversation-cache", 0, "the fanout's --conversation-cache (0: as inboxd fanout; negative: none)")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		l, err := parseFloats(loads)
		if err != nil {
			return nil, fmt.Errorf("--loads: %w", err)
		}
		c.Loads = l
		if c.RampSteps == 0 {
			c.RampSteps = -1 // E2EConfig's zero is its default
		}
		switch wsLoads {
		case "":
		case "none":
			c.SkipWS = true
		default:
			if c.WSLoads, err = parseFloats(wsLoads); err != nil {
				return nil, fmt.Errorf("--ws-loads: %w", err)
			}
		}
		return bench.E2E(ctx, env, c)
	}
}

func bindSync(fs *flag.FlagSet) runFunc {
	var c bench.SyncConfig
	fs.IntVar(&c.Users, "users", 4000, "users (each inbox holds 2*members + messages*members entries)")
	fs.IntVar(&c.Members, "members", 7, "members per conversation and conversations per user")
	fs.IntVar(&c.Messages, "messages", 35, "text messages per conversation")
	fs.IntVar(&c.Conns, "conns", 64, "keep-alive connections of the load generator")
	fs.Float64Var(&c.Seconds, "seconds", 8, "length of each kind of request")
	fs.BoolVar(&c.Profile, "profile", true, "take a CPU profile of the gateway during the pages")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		return bench.Sync(ctx, env, c)
	}
}

func bindIdle(fs *flag.FlagSet) runFunc {
	var c bench.IdleConfig
	fs.IntVar(&c.Conns, "conns", 15000, "idle WebSockets to hold")
	fs.IntVar(&c.Workers, "workers", 3, "client processes (at least 2)")
	fs.IntVar(&c.IPs, "ips", 2, "127.0.0.x source addresses per client process")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		return bench.Idle(ctx, env, c)
	}
}

func bindStorm(fs *flag.FlagSet) runFunc {
	var c bench.StormConfig
	var modes string
	fs.IntVar(&c.Clients, "clients", 3000, "clients")
	fs.IntVar(&c.Workers, "workers", 2, "client processes")
	fs.DurationVar(&c.RecoverTimeout, "recover-timeout", 45*time.Second, "longest wait for every client to be back")
	fs.DurationVar(&c.Down, "down", 3*time.Second, "how long the gateway stays down between the old process's exit and the new one's start")
	fs.StringVar(&modes, "modes", "sdk,sdk-ws,naive,sdk-hints,sdk-kill", "kinds of client, in order: sdk (client package defaults), sdk-ws (WebSocket only), naive, all three against a gateway without reconnect hints; sdk-hints (the SDK, a gateway with hints stopped by SIGTERM), sdk-kill (the same killed with SIGKILL)")
	fs.DurationVar(&c.RestartDelay, "restart-delay", 0, "the gateway's --restart-delay in the hinted runs (0: --down + 1s, the time a restart takes here)")
	fs.Float64Var(&c.AdmitRate, "admit-rate", 0, "the gateway's --admit-rate in the hinted runs (0: its default)")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		c.Modes = config.SplitList(modes)
		return bench.Storm(ctx, env, c)
	}
}

func bindAttachments(fs *flag.FlagSet) runFunc {
	var c bench.AttachmentsConfig
	fs.IntVar(&c.Files, "files", 200, "files uploaded and sent (and plain PUTs of the reference)")
	fs.Int64Var(&c.Size, "size", 1<<20, "bytes of each file")
	fs.IntVar(&c.Concurrency, "concurrency", 4, "uploads in flight at once, each into a conversation of its own")
	fs.IntVar(&c.Partitions, "partitions", 4, "topic partitions")
	fs.IntVar(&c.Images, "images", 100, "photos sent --concurrency at once for thumbnails/s (uploaded beforehand; at most 100 per sender, the gateway's open uploads per user)")
	fs.IntVar(&c.Lone, "lone", 10, "photos sent one at a time, each once the last one's thumbnail is announced, for the latency at each interval")
	fs.DurationVar(&c.ShortInterval, "short-interval", 50*time.Millisecond, "the thumbnail worker's interval of the second gateway (the first runs at the gateway's default)")
	fs.IntVar(&c.ImageWidth, "image-width", 2000, "photo width in pixels")
	fs.IntVar(&c.ImageHeight, "image-height", 1500, "photo height in pixels")
	fs.Int64Var(&c.ImageSize, "image-size", 1<<20, "photo size in bytes the JPEG quality is chosen for")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		return bench.Attachments(ctx, env, c)
	}
}

func bindChanges(fs *flag.FlagSet) runFunc {
	var c bench.ChangesConfig
	fs.IntVar(&c.Conversations, "conversations", 300, "conversations of the edits, each of its own members (one WebSocket per member)")
	fs.IntVar(&c.Members, "members", 7, "members per conversation of the edits")
	fs.Float64Var(&c.Rate, "rate", 1000, "edits/s offered, and sends/s of the reference")
	fs.Float64Var(&c.Seconds, "seconds", 10, "length of the edit phase and of the send phase")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", 0, "the gateway's PostgreSQL pool size (0: as inboxd gateway, max(16, cores))")
	fs.IntVar(&c.ReactionMembers, "reaction-members", 500, "members of the conversation of the reactions")
	fs.Float64Var(&c.ReactionRate, "reaction-rate", 1000, "reaction changes/s appended on its one message")
	fs.Float64Var(&c.ReactionSeconds, "reaction-seconds", 10, "length of the reaction burst")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		return bench.Changes(ctx, env, c)
	}
}

func bindLarge(fs *flag.FlagSet) runFunc {
	var c bench.LargeConfig
	fs.IntVar(&c.Members, "members", 100000, "N: members of the large conversation (built by bulk add, 1,000 per request)")
	fs.IntVar(&c.Connected, "connected", 15000, "C: of them connected over WebSocket with \"large\": true (negative: none, the cost of the large conversation's sends alone)")
	fs.Float64Var(&c.Rate, "rate", 100, "R: messages/s sent into the large conversation")
	fs.Float64Var(&c.Seconds, "seconds", 60, "D: length of each phase (the reference without the large traffic, then with it)")
	fs.IntVar(&c.Small, "small", 2000, "S: small conversations carrying a normal load (one connected member each)")
	fs.IntVar(&c.SmallMembers, "small-members", 3, "members per small conversation")
	fs.Float64Var(&c.SmallRate, "small-rate", 100, "messages/s over all the small conversations, in both phases")
	fs.IntVar(&c.Senders, "senders", 20, "members of the large conversation that send into it (never connected)")
	fs.IntVar(&c.BuildConcurrency, "build-concurrency", 4, "bulk-add requests in flight during the build")
	fs.IntVar(&c.Channels, "channels", 50, "read-mode channels of the user whose GET /v1/sync is timed")
	fs.IntVar(&c.SyncRequests, "sync-requests", 400, "timed GET /v1/sync per user (40/s)")
	fs.IntVar(&c.Workers, "workers", 0, "processes receiving the large conversation (0: one per 8,000 WebSockets, at least 2); the small conversations' receivers run in one more")
	fs.IntVar(&c.Nice, "nice", 10, "scheduling priority of the large conversation's receiving processes, which stand for devices on other machines (negative: 0, the normal priority)")
	fs.IntVar(&c.LargeThreshold, "large-threshold", 0, "the fanout's read fan-out threshold (0: its default)")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", 0, "the gateway's PostgreSQL pool size (0: as inboxd gateway, max(16, cores))")
	fs.BoolVar(&c.Profile, "profile", false, "a CPU profile of the gateway per phase (in the output directory) and a sample of PostgreSQL's active statements")
	fs.Float64Var(&c.LargePushRate, "ws-large-push-rate", 0, "the gateway's pacing of read-mode pushes, writes/s per conversation (0: its default; negative: none)")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		return bench.Large(ctx, env, c)
	}
}

func bindSearch(fs *flag.FlagSet) runFunc {
	var c bench.SearchConfig
	fs.IntVar(&c.Messages, "messages", 1_000_000, "text messages generated (COPY) for the searches")
	fs.IntVar(&c.Conversations, "conversations", 10_000, "conversations they are spread over")
	fs.IntVar(&c.Members, "members", 8, "members per conversation (also of the write cost's conversations)")
	fs.IntVar(&c.MemberOf, "member-of", 200, "conversations the searching user (and every user) is a member of")
	fs.IntVar(&c.Vocabulary, "vocabulary", 5000, "words of the text, drawn with a Zipf distribution")
	fs.Float64Var(&c.CJKShare, "cjk-share", 0.05, "share of the messages in Chinese, Japanese or Korean")
	fs.IntVar(&c.Requests, "requests", 200, "timed requests of each kind of query (and of the references)")
	fs.IntVar(&c.WriteMessages, "write-messages", 200_000, "messages projected per round of the write cost, into each database (negative: no write cost)")
	fs.IntVar(&c.WriteConversations, "write-conversations", 1000, "conversations of the write cost")
	fs.IntVar(&c.WriteRounds, "write-rounds", 2, "rounds of the write cost, alternating which database goes first")
	fs.IntVar(&c.MaxPollRecords, "max-poll-records", 5000, "fanout batch size of the write cost")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		return bench.Search(ctx, env, c)
	}
}

func bindAll(fs *flag.FlagSet) runFunc {
	var c bench.AllConfig
	var only string
	var quick bool
	fs.StringVar(&c.Docs, "docs", "docs/benchmarks.md", "report whose generated blocks are replaced (empty: none)")
	fs.StringVar(&c.Images, "images", "docs/images", "directory of the charts (empty: none)")
	fs.StringVar(&only, "only", "", "comma-separated figures to run (fanout,e2e,sync,idle,storm,changes,large); default all but changes and large, which run only when named")
	fs.BoolVar(&quick, "quick", false, "small sizes, to check the suite in a few minutes (the figures are not the report's)")
	fs.BoolVar(&c.NoProfiles, "no-profiles", false, "skip the CPU profiles")
	return func(ctx context.Context, env *bench.Env) (bench.Result, error) {
		c.Only = config.SplitList(only)
		if quick {
			c = c.Quick()
		}
		if c.Docs != "" {
			if _, err := os.Stat(c.Docs); err != nil {
				fmt.Fprintf(os.Stderr, "bench all: %s not found (run from the repository root), the report is not updated\n", c.Docs)
				c.Docs = ""
				if !config.Given(fs, "images") {
					c.Images = ""
				}
			}
		}
		if c.Images != "" {
			if err := os.MkdirAll(c.Images, 0o755); err != nil {
				return nil, err
			}
		}
		r, err := bench.All(ctx, env, c)
		fmt.Fprintf(os.Stderr, "bench all: finished in %.1f minutes\n", r.Seconds/60)
		return r, err
	}
}

// parseFloats parses a comma-separated list of positive numbers.
func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("no load")
	}
	return out, nil
}
