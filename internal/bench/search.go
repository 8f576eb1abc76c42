package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/protocol"
)

// SearchConfig configures Search. Zero fields take the defaults in
// brackets.
type SearchConfig struct {
	// Messages [1000000] text messages in Conversations [10000]
	// conversations of Members [8] members; every user, the target among
	// them, is a member of about MemberOf [200] conversations.
	Messages      int
	Conversations int
	Members       int
	MemberOf      int
	// Vocabulary [5000] words, drawn with a Zipf distribution; CJKShare
	// [0.05] of the messages are Chinese, Japanese or Korean.
	Vocabulary int
	CJKShare   float64
	// Requests [200] timed of each kind of query, limit 20, one at a
	// time, the kinds in turn.
	Requests int
	// WriteMessages [200000] messages appended for each round of the
	// write cost, into WriteConversations [1000] conversations of Members
	// members, projected by a fanout of MaxPollRecords [5000] per batch
	// from a backlog; WriteRounds [2] rounds, alternating which database
	// goes first. Negative WriteMessages: no write cost.
	WriteMessages      int
	WriteConversations int
	WriteRounds        int
	MaxPollRecords     int
	Partitions         int // [4] of the write cost's topic
}

func (c *SearchConfig) setDefaults() {
	setDefault(&c.Messages, 1_000_000)
	setDefault(&c.Conversations, 10_000)
	setDefault(&c.Members, 8)
	setDefault(&c.MemberOf, 200)
	setDefault(&c.Vocabulary, 5000)
	setDefault(&c.CJKShare, 0.05)
	setDefault(&c.Requests, 200)
	setDefault(&c.WriteMessages, 200_000)
	setDefault(&c.WriteConversations, 1000)
	setDefault(&c.WriteRounds, 2)
	setDefault(&c.MaxPollRecords, 5000)
	setDefault(&c.Partitions, 4)
}

func (c SearchConfig) check() error {
	switch {
	case c.Conversations < 1 || c.Messages < c.Conversations:
		return fmt.Errorf("search: %d messages in %d conversations: at least one message per conversation", c.Messages, c.Conversations)
	case c.Members < 2 || c.MemberOf < 1 || c.MemberOf > c.Conversations:
		return fmt.Errorf("search: %d members per conversation, member of %d of %d: want at least 2 members and 1..conversations", c.Members, c.MemberOf, c.Conversations)
	case c.Requests < 1:
		return fmt.Errorf("search: %d requests per kind", c.Requests)
	}
	return nil
}

// SearchResult is the outcome of Search.
type SearchResult struct {
	Data searchData `json:"data"`
	// TargetConversations and TargetMessages: what the target may find.
	TargetConversations int         `json:"target_conversations"`
	TargetMessages      int64       `json:"target_messages"`
	Seed                searchBuild `json:"seed"`
	SeedSeconds         float64     `json:"seed_seconds"`
	// Sizes in bytes: the search index, the messages heap (every column),
	// the search column's values and the bodies'.
	IndexBytes  int64 `json:"index_bytes"`
	HeapBytes   int64 `json:"heap_bytes"`
	VectorBytes int64 `json:"vector_bytes"`
	BodyBytes   int64 `json:"body_bytes"`
	// Kinds are the timed searches; PrimaryKey the reference, a SELECT
	// of 20 messages by primary key on the same database; History the
	// history page of 20 through the same gateway.
	Kinds      []SearchKind `json:"kinds"`
	PrimaryKey SearchKind   `json:"primary_key"`
	History    SearchKind   `json:"history"`
	// QueryLoad is the 1-minute load average before and after the timed
	// requests: the machine's other work falls on the figure and its
	// reference alike, but shows in both.
	QueryLoad [2]float64   `json:"query_load_average_1m"`
	Write     *SearchWrite `json:"write,omitempty"`
}

// SearchKind is one kind of request, timed.
type SearchKind struct {
	Name    string `json:"name"`
	Example string `json:"example"` // its first request
	Latency Dist   `json:"latency"`
	Errors  int    `json:"errors"`
	// FirstErr is the first error's text.
	FirstErr string `json:"first_error,omitempty"`
	// MeanResults is the mean results per page, MeanEstimated the mean
	// estimated_total (counted up to 1,000).
	MeanResults   float64 `json:"mean_results"`
	MeanEstimated float64 `json:"mean_estimated_total"`
	// TableMatches is how many of all the messages the example's terms
	// match, whoever may see them (what the index hands the join); -1
	// when not counted.
	TableMatches int64 `json:"table_matches"`
}

// SearchWrite is the search's cost to the fanout: the same messages
// projected into a database with the search column and index, one
// without either, and one with the column only.
type SearchWrite struct {
	Messages   int              `json:"messages_per_round"`
	Members    int              `json:"members"`
	BatchSize  int              `json:"max_poll_records"`
	With       []SearchWriteRun `json:"with_index"`
	Without    []SearchWriteRun `json:"without_index"`
	ColumnOnly []SearchWriteRun `json:"column_without_index"`
}

// SearchWriteRun is one round of one database.
type SearchWriteRun struct {
	Messages int `json:"messages"`
	// Seconds from the fanout's start on the backlog to its last commit;
	// ApplySeconds the time its batches took (one apply worker).
	Seconds      float64 `json:"seconds"`
	ApplySeconds float64 `json:"apply_seconds"`
	Batches      uint64  `json:"batches"`
	Load         float64 `json:"load_average_1m_at_end"`
}

// rates sums runs: messages per second of the whole catch-up and of the
// batches' apply time, and the mean records per batch.
func searchWriteRates(runs []SearchWriteRun) (wall, apply, perBatch float64) {
	var n, s, a, b float64
	for _, r := range runs {
		n += float64(r.Messages)
		s += r.Seconds
		a += r.ApplySeconds
		b += float64(r.Batches)
	}
	return div(n, s), div(n, a), div(n, b)
}

// Rows implements Result.
func (r SearchResult) Rows() []Row {
	pk := r.PrimaryKey.Latency
	ref := fmt.Sprintf("SELECT of 20 messages by primary key, same database: %s / %s", ms(pk.P50), ms(pk.P99))
	var rows []Row
	for _, k := range r.Kinds {
		fig := fmt.Sprintf("search, %s (%s), limit 20, member of %d conversations of %s messages, p50 / p99 of %d",
			k.Name, k.Example, r.TargetConversations, num(float64(r.Data.Messages)), k.Latency.N)
		rows = append(rows, Row{Figure: fig,
			Value:     fmt.Sprintf("%s / %s", ms(k.Latency.P50), ms(k.Latency.P99)),
			Reference: ref,
			Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(k.Latency.P50, pk.P50), ratio(k.Latency.P99, pk.P99)),
		})
	}
	h := r.History.Latency
	rows = append(rows, Row{
		Figure:    fmt.Sprintf("history page of 20 through the same gateway (GET /v1/conversations/{cid}/messages), p50 / p99 of %d", h.N),
		Value:     fmt.Sprintf("%s / %s", ms(h.P50), ms(h.P99)),
		Reference: ref,
		Ratio:     fmt.Sprintf("p50 %s, p99 %s", ratio(h.P50, pk.P50), ratio(h.P99, pk.P99)),
	}, Row{
		Figure:    fmt.Sprintf("search index size (messages_search, GIN, %s text messages)", num(float64(r.Data.Messages))),
		Value:     mib(r.IndexBytes),
		Reference: "messages heap, every column: " + mib(r.HeapBytes),
		Ratio:     ratio(float64(r.IndexBytes), float64(r.HeapBytes)),
	}, Row{
		Figure:    "search column in the heap (sum of pg_column_size(search_vector))",
		Value:     mib(r.VectorBytes),
		Reference: "the bodies: " + mib(r.BodyBytes),
		Ratio:     ratio(float64(r.VectorBytes), float64(r.BodyBytes)),
	}, Row{
		Figure:    fmt.Sprintf("build of the search index over %s messages (CREATE INDEX, maintenance_work_mem 512MB)", num(float64(r.Data.Messages))),
		Value:     seconds(r.Seed.SearchSeconds),
		Reference: "the message id index (B-tree on uuid): " + seconds(r.Seed.MsgIDSeconds),
		Ratio:     ratio(r.Seed.SearchSeconds, r.Seed.MsgIDSeconds),
	})
	if w := r.Write; w != nil {
		ww, wa, wb := searchWriteRates(w.With)
		ow, oa, _ := searchWriteRates(w.Without)
		_, ca, _ := searchWriteRates(w.ColumnOnly)
		rows = append(rows, Row{
			Figure: fmt.Sprintf("fan-out with the search column and index, messages/s of batch apply time (%d members, %s messages x %d rounds, %.0f records per batch)",
				w.Members, num(float64(w.Messages)), len(w.With), wb),
			Value:     num(wa),
			Reference: "same messages, same run, column and index dropped: " + num(oa),
			Ratio:     ratio(wa, oa),
		}, Row{
			Figure:    "the same, messages/s from the fanout's start on the backlog to its last commit",
			Value:     num(ww),
			Reference: "column and index dropped: " + num(ow),
			Ratio:     ratio(ww, ow),
		}, Row{
			Figure:    "fan-out with the search column but not its index, messages/s of batch apply time",
			Value:     num(ca),
			Reference: "column and index dropped: " + num(oa),
			Ratio:     ratio(ca, oa),
		})
	}
	return rows
}

// seconds formats a duration in seconds.
func seconds(s float64) string {
	if s >= 10 {
		return fmt.Sprintf("%.0f s", s)
	}
	return fmt.Sprintf("%.2f s", s)
}

// mib formats bytes in MiB.
func mib(b int64) string {
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// Search measures GET /v1/search over a generated projection
// (searchdata.go): each kind of query as one user, one at a time, next to
// a SELECT of as many messages by primary key on the same database; the
// index's size; and the index's cost to the fanout, the same messages
// projected with and without it.
func Search(ctx context.Context, env *Env, cfg SearchConfig) (SearchResult, error) {
	cfg.setDefaults()
	var res SearchResult
	if err := cfg.check(); err != nil {
		return res, err
	}
	pr := env.Progress
	vocab := searchVocabulary(cfg.Vocabulary)
	d := newSearchData(cfg.Messages, cfg.Conversations, cfg.Members, cfg.MemberOf)
	res.Data = d

	dbURL, drop, err := env.newDatabase(ctx, "search")
	if err != nil {
		return res, err
	}
	defer drop()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	t0 := time.Now()
	progressf(pr, "bench search: seeding %s messages in %d conversations of %d members (%d users) ...",
		num(float64(d.Messages)), d.Conversations, d.Members, d.Users)
	if res.Seed, err = d.seed(ctx, pool, vocab, cfg.CJKShare, pr); err != nil {
		return res, fmt.Errorf("seed: %w", err)
	}
	// As autovacuum leaves a table that has been there a while: analyzed,
	// hint bits set, visibility map written; nothing dirty to flush
	// during the measurement.
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return res, err
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return res, err
	}
	res.SeedSeconds = time.Since(t0).Seconds()
	progressf(pr, "bench search: seeded in %.1fs (copy %.1fs)", res.SeedSeconds, res.Seed.CopySeconds)

	if err := pool.QueryRow(ctx, `SELECT pg_relation_size('messages_search'), pg_relation_size('messages'),
		coalesce(sum(pg_column_size(search_vector)), 0), coalesce(sum(pg_column_size(body)), 0) FROM messages`).
		Scan(&res.IndexBytes, &res.HeapBytes, &res.VectorBytes, &res.BodyBytes); err != nil {
		return res, fmt.Errorf("sizes: %w", err)
	}
	var convs []int64
	senders := map[int64]bool{}
	for c := 0; c < d.Conversations; c++ {
		m := d.membersOf(c)
		if slices.Contains(m, searchTarget) {
			convs = append(convs, int64(c+1))
			for _, u := range m {
				senders[u] = u != searchTarget
			}
		}
	}
	res.TargetConversations = len(convs)
	res.TargetMessages = int64(len(convs)) * int64(d.PerConversation)
	var others []int64
	for u, ok := range senders {
		if ok {
			others = append(others, u)
		}
	}
	slices.Sort(others)
	kinds := searchKinds(d, vocab, convs, others)

	for i := range kinds {
		k := &kinds[i]
		k.stat.TableMatches = -1
		if k.tsquery == "" {
			continue
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE search_vector @@ `+k.tsquery, k.terms).
			Scan(&k.stat.TableMatches); err != nil {
			return res, fmt.Errorf("count the matches of %s: %w", k.stat.Name, err)
		}
		progressf(pr, "bench search: %s (%s) matches %s of all messages", k.stat.Name, k.stat.Example, num(float64(k.stat.TableMatches)))
	}

	cluster, err := newKafka(4)
	if err != nil {
		return res, err
	}
	defer cluster.Close()
	secret := randomSecret()
	gw, ready, err := startServe(ctx, env, "gateway", serveConfig{Mode: "gateway", DatabaseURL: dbURL,
		Brokers: cluster.ListenAddrs(), Partitions: 4, Secret: secret, SyncRate: 1e6, SyncBurst: 1_000_000})
	if err != nil {
		return res, err
	}
	defer gw.kill()
	tok, err := gateway.IssueToken([]byte(secret), searchTarget, 2*time.Hour)
	if err != nil {
		return res, err
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer client.CloseIdleConnections()
	res.QueryLoad[0] = loadAverage()
	if err := runSearchKinds(ctx, pool, client, ready.Addr, tok, d, convs, kinds, cfg.Requests, &res, pr); err != nil {
		return res, err
	}
	res.QueryLoad[1] = loadAverage()
	_ = gw.stop(20 * time.Second)
	cluster.Close()
	pool.Close()
	drop()

	if cfg.WriteMessages > 0 {
		w, err := searchWriteCost(ctx, env, cfg, vocab)
		if err != nil {
			return res, fmt.Errorf("write cost: %w", err)
		}
		res.Write = &w
	}
	return res, nil
}

// searchKindSpec is a kind of request: its paths, used in turn, and for
// the count over all messages its tsquery (SQL over $1) and terms.
type searchKindSpec struct {
	stat    SearchKind
	paths   []string
	tsquery string
	terms   string
}

// searchKinds are the timed kinds: words common and rare, a phrase,
// prefixes, CJK, and a common word under each filter. Each has ten
// variants used in turn (words of about the same rank), so that a kind is
// not one query answered from a warm cache.
func searchKinds(d searchData, vocab []string, convs, others []int64) []searchKindSpec {
	const variants = 10
	from := func(lo int) []string { // ten words from rank lo on
		lo = min(lo, len(vocab)-variants)
		return vocab[lo : lo+variants]
	}
	const rareRank = 3000
	common, rare := from(10), from(rareRank)
	rareLo := min(rareRank, len(vocab)-variants)
	q := func(text string, extra ...string) string {
		v := url.Values{"q": {text}, "limit": {"20"}}
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		return "/v1/search?" + v.Encode()
	}
	var prefix3 []string
	// From rank 46 on, the chat's topic words (meeting, tomorrow, ...).
	for _, w := range vocab[min(45, len(vocab)):] {
		if len(w) >= 4 && len(prefix3) < variants {
			prefix3 = append(prefix3, w[:3])
		}
	}
	after := d.at(0, d.PerConversation*9/10+1).Format(time.RFC3339)
	kinds := []searchKindSpec{
		{stat: SearchKind{Name: "a common word, ranks 11-20"}, tsquery: "plainto_tsquery(inboxd_search.config(), $1)"},
		{stat: SearchKind{Name: fmt.Sprintf("a rare word, ranks %d-%d", rareLo+1, rareLo+variants)}, tsquery: "plainto_tsquery(inboxd_search.config(), $1)"},
		{stat: SearchKind{Name: "a phrase of two of the 11 commonest words"}, tsquery: "phraseto_tsquery(inboxd_search.config(), $1)"},
		{stat: SearchKind{Name: "a prefix of 2 letters"}, tsquery: "to_tsquery(inboxd_search.config(), $1 || ':*')"},
		{stat: SearchKind{Name: "a prefix of 3 letters"}, tsquery: "to_tsquery(inboxd_search.config(), $1 || ':*')"},
		{stat: SearchKind{Name: "CJK, a 2-character Chinese word"}, tsquery: "phraseto_tsquery(inboxd_search.config(), $1)"},
		{stat: SearchKind{Name: "a common word, filtered by conversation_id"}},
		{stat: SearchKind{Name: "a common word, filtered by sender_id"}},
		{stat: SearchKind{Name: "a common word, filtered by after (the last 10% of the time)"}},
	}
	for i := 0; i < variants; i++ {
		zh := cjkWords["zh"][i%len(cjkWords["zh"])]
		kinds[0].paths = append(kinds[0].paths, q(common[i]+" "))
		kinds[1].paths = append(kinds[1].paths, q(rare[i]+" "))
		phrase := vocab[i] + " " + vocab[i+1]
		kinds[2].paths = append(kinds[2].paths, q(`"`+phrase+`"`))
		kinds[3].paths = append(kinds[3].paths, q(common[i][:min(2, len(common[i]))]))
		kinds[4].paths = append(kinds[4].paths, q(prefix3[i%len(prefix3)]))
		kinds[5].paths = append(kinds[5].paths, q(zh))
		kinds[6].paths = append(kinds[6].paths, q(common[i]+" ", "conversation_id", strconv.FormatInt(convs[i%len(convs)], 10)))
		kinds[7].paths = append(kinds[7].paths, q(common[i]+" ", "sender_id", strconv.FormatInt(others[i%len(others)], 10)))
		kinds[8].paths = append(kinds[8].paths, q(common[i]+" ", "after", after))
		if i == 0 {
			kinds[0].terms, kinds[1].terms, kinds[2].terms = common[0], rare[0], phrase
			kinds[3].terms, kinds[4].terms, kinds[5].terms = common[0][:min(2, len(common[0]))], prefix3[0], zh
		}
	}
	for i := range kinds {
		u, _ := url.Parse(kinds[i].paths[0])
		ex := "q=" + strings.TrimSpace(u.Query().Get("q"))
		for _, f := range []string{"conversation_id", "sender_id", "after"} {
			if v := u.Query().Get(f); v != "" {
				ex += " " + f + "=" + v
			}
		}
		kinds[i].stat.Example = strings.TrimSpace(ex)
	}
	return kinds
}

// runSearchKinds times every kind, the history page and the primary key
// reference, each request in turn (kind after kind, round after round) so
// that whatever else the machine does falls on all of them alike.
func runSearchKinds(ctx context.Context, pool *pgxpool.Pool, client *http.Client, addr, tok string, d searchData,
	convs []int64, kinds []searchKindSpec, n int, res *SearchResult, pr io.Writer) error {
	lat := make([][]float64, len(kinds)+2) // the kinds, history, primary key
	sums := make([][2]float64, len(kinds))
	errs := make([]int, len(kinds)+2)
	firstErr := make([]string, len(kinds)+2)
	fail := func(i int, err error) {
		errs[i]++
		if firstErr[i] == "" {
			firstErr[i] = err.Error()
		}
	}
	get := func(path string) ([]byte, float64, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
		if err != nil {
			return nil, 0, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		t := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return nil, 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		el := float64(time.Since(t).Microseconds()) / 1000
		if err != nil {
			return nil, 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, 0, fmt.Errorf("GET %s: HTTP %d: %.200s", path, resp.StatusCode, body)
		}
		return body, el, nil
	}
	rnd := rand.New(rand.NewPCG(3, 5))
	warm := min(10, n)
	progressf(pr, "bench search: %d kinds of request, %d each (after %d untimed) ...", len(kinds)+2, n, warm)
	tp := time.Now()
	for round := -warm; round < n; round++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		timed := round >= 0
		for i, k := range kinds {
			body, el, err := get(k.paths[(round+warm)%len(k.paths)])
			if err != nil {
				fail(i, err)
				continue
			}
			var page protocol.SearchResults
			if err := json.Unmarshal(body, &page); err != nil {
				fail(i, fmt.Errorf("decode: %w", err))
				continue
			}
			if timed {
				lat[i] = append(lat[i], el)
				sums[i][0] += float64(len(page.Results))
				if page.EstimatedTotal != nil {
					sums[i][1] += float64(*page.EstimatedTotal)
				}
			}
		}
		// The history page: 20 messages before a random seq of one of the
		// target's conversations.
		cid := convs[rnd.IntN(len(convs))]
		before := 22 + rnd.IntN(max(1, d.PerConversation-20))
		body, el, err := get(fmt.Sprintf("/v1/conversations/%d/messages?before=%d&limit=20", cid, before))
		if err == nil {
			var h protocol.History
			if err = json.Unmarshal(body, &h); err == nil && len(h.Messages) != min(20, before-1, d.PerConversation+1) {
				err = fmt.Errorf("history of %d before %d: %d messages", cid, before, len(h.Messages))
			}
		}
		if err != nil {
			fail(len(kinds), err)
		} else if timed {
			lat[len(kinds)] = append(lat[len(kinds)], el)
		}
		// The reference: as many rows by primary key, same database.
		cid = convs[rnd.IntN(len(convs))]
		from := 1 + rnd.IntN(max(1, d.PerConversation-20))
		el, err = selectByKey(ctx, pool, cid, int64(from), min(20, d.PerConversation+2-from))
		if err != nil {
			fail(len(kinds)+1, err)
		} else if timed {
			lat[len(kinds)+1] = append(lat[len(kinds)+1], el)
		}
		if timed && (round+1)%50 == 0 {
			progressf(pr, "bench search: round %d/%d, %.0fs", round+1, n, time.Since(tp).Seconds())
		}
	}
	for i, k := range kinds {
		s := k.stat
		s.Latency = newDist(lat[i])
		s.Latency.CDF = nil
		s.Errors, s.FirstErr = errs[i], firstErr[i]
		s.MeanResults = div(sums[i][0], float64(s.Latency.N))
		s.MeanEstimated = div(sums[i][1], float64(s.Latency.N))
		res.Kinds = append(res.Kinds, s)
		progressf(pr, "bench search: %s: p50 %s p99 %s, %.1f results, %.0f estimated, %d errors %s", s.Name,
			ms(s.Latency.P50), ms(s.Latency.P99), s.MeanResults, s.MeanEstimated, s.Errors, s.FirstErr)
	}
	res.History = SearchKind{Name: "history page", Example: "limit=20", Latency: newDist(lat[len(kinds)]),
		Errors: errs[len(kinds)], FirstErr: firstErr[len(kinds)], TableMatches: -1}
	res.PrimaryKey = SearchKind{Name: "SELECT by primary key", Example: "20 rows", Latency: newDist(lat[len(kinds)+1]),
		Errors: errs[len(kinds)+1], FirstErr: firstErr[len(kinds)+1], TableMatches: -1}
	res.History.Latency.CDF, res.PrimaryKey.Latency.CDF = nil, nil
	for _, k := range append(slices.Clone(res.Kinds), res.History, res.PrimaryKey) {
		if k.Latency.N == 0 {
			return fmt.Errorf("search: no %s succeeded: %s", k.Name, k.FirstErr)
		}
	}
	return nil
}

// sqlSelectByKey reads 20 messages of a conversation from a seq: the
// reference of the search figure, the cheapest read of as many rows.
const sqlSelectByKey = `SELECT conversation_id, seq, msg_id, sender_id, kind, body, created_at
	FROM messages WHERE conversation_id = $1 AND seq >= $2 ORDER BY seq LIMIT 20`

// selectByKey times sqlSelectByKey, its rows read, in milliseconds; it
// expects want rows.
func selectByKey(ctx context.Context, pool *pgxpool.Pool, cid, from int64, want int) (float64, error) {
	t := time.Now()
	rows, err := pool.Query(ctx, sqlSelectByKey, cid, from)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		var (
			c, s, sender int64
			id           [16]byte
			kind, body   string
			at           time.Time
		)
		if err := rows.Scan(&c, &s, &id, &sender, &kind, &body, &at); err != nil {
			rows.Close()
			return 0, err
		}
		n++
	}
	rows.Close()
	el := float64(time.Since(t).Microseconds()) / 1000
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if n != want {
		return 0, fmt.Errorf("conversation %d from seq %d: %d rows", cid, from, n)
	}
	return el, nil
}
