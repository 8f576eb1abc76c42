package gateway

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/rows"
	"github.com/inboxd/inboxd/protocol"
)

// Message search (docs/protocol.md, "GET /v1/search"): PostgreSQL's full
// text search over messages.search_vector, which the database computes
// from the row (migrations/00026_search.sql), restricted to the caller's
// membership spans the way history is.

const (
	searchMaxQuery = 256 // bytes of q
	searchMaxTerms = 16  // terms after splitting
	searchMaxLimit = 100 // results per page
	searchDefLimit = 20  // when limit is absent
)

// The markers ts_headline puts around a matched word: private-use
// characters, turned into snippet segments before the answer.
const (
	markStart = "\ue000"
	markStop  = "\ue001"
)

// searchTermKind is how one term of q becomes a tsquery.
type searchTermKind uint8

const (
	termWord   searchTermKind = iota // plainto_tsquery
	termPhrase                       // phraseto_tsquery: words in order
	termPrefix                       // to_tsquery of 'x':*
)

type searchTerm struct {
	kind searchTermKind
	text string
}

// searchKey is a result's place in the order, what a cursor holds.
type searchKey struct {
	rank float32 // relevance order only
	at   int64   // created_at, unix microseconds
	cid  int64
	seq  int64
}

type searchQuery struct {
	terms               []searchTerm
	cid, sender         int64
	after, before       *time.Time
	afterSeq, beforeSeq *int64
	hasAttachment       *bool
	mentionsMe          bool
	relevance           bool
	limit               int
	cursor              *searchKey
}

// isCJK says whether r is of a script search finds by substring.
func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// wordRune is a letter, digit or mark: what a prefix term keeps.
func wordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// cjkTerm is the term of one run of CJK characters: the phrase of its
// overlapping bigrams (how migrations/00026_search.sql indexes runs), or,
// for a single character, the prefix of the bigrams and last characters
// that start with it.
func cjkTerm(run []rune) searchTerm {
	if len(run) == 1 {
		return searchTerm{termPrefix, "'" + string(run) + "':*"}
	}
	grams := make([]string, 0, len(run)-1)
	for i := 0; i+1 < len(run); i++ {
		grams = append(grams, string(run[i:i+2]))
	}
	return searchTerm{termPhrase, strings.Join(grams, " ")}
}

// splitCJK cuts s into its runs of CJK characters and the text between.
func splitCJK(s string) (runs [][]rune, rest []string) {
	var cur, other []rune
	for _, r := range s {
		if isCJK(r) {
			cur = append(cur, r)
			continue
		}
		if len(cur) > 0 {
			runs, cur = append(runs, cur), nil
			other = append(other, ' ')
		}
		other = append(other, r)
	}
	if len(cur) > 0 {
		runs = append(runs, cur)
	}
	for _, f := range strings.Fields(string(other)) {
		rest = append(rest, f)
	}
	return runs, rest
}

// parseSearchTerms reads q: words, "quoted phrases", and the last word
// as a prefix when prefix is set and q does not end with a space or a
// quote.
func parseSearchTerms(q string, prefix bool) ([]searchTerm, error) {
	var terms []searchTerm
	add := func(kind searchTermKind, text string) {
		runs, rest := splitCJK(text)
		for _, run := range runs {
			terms = append(terms, cjkTerm(run))
		}
		if len(rest) == 0 {
			return
		}
		if kind == termPhrase {
			terms = append(terms, searchTerm{termPhrase, strings.Join(rest, " ")})
			return
		}
		for _, w := range rest {
			terms = append(terms, searchTerm{termWord, w})
		}
	}
	last := strings.TrimRightFunc(q, unicode.IsSpace)
	endsInWord := prefix && last == q && !strings.HasSuffix(q, `"`)
	parts := strings.Split(q, `"`)
	for i, part := range parts {
		if i%2 == 1 { // inside quotes (an unclosed quote runs to the end)
			add(termPhrase, part)
			continue
		}
		words := strings.Fields(part)
		if i == len(parts)-1 && endsInWord && len(words) > 0 {
			lastWord := words[len(words)-1]
			words = words[:len(words)-1]
			for _, w := range words {
				add(termWord, w)
			}
			if strings.IndexFunc(lastWord, isCJK) >= 0 {
				add(termWord, lastWord)
				continue
			}
			// The word's letter runs: all but the last whole words, the
			// last a prefix ("o'bri" finds "o'brien").
			pieces := strings.FieldsFunc(lastWord, func(r rune) bool { return !wordRune(r) })
			for j, p := range pieces {
				if j == len(pieces)-1 {
					terms = append(terms, searchTerm{termPrefix, "'" + p + "':*"})
				} else {
					terms = append(terms, searchTerm{termWord, p})
				}
			}
			continue
		}
		for _, w := range words {
			add(termWord, w)
		}
	}
	if len(terms) > searchMaxTerms {
		return nil, apierr.BadRequest("q has %d terms, at most %d are searched", len(terms), searchMaxTerms)
	}
	return terms, nil
}

// queryTime reads an optional RFC 3339 time.
func queryTime(q url.Values, name string) (*time.Time, error) {
	vs, ok := q[name]
	if !ok {
		return nil, nil
	}
	if len(vs) != 1 {
		return nil, apierr.BadRequest("parameter %s given more than once", name)
	}
	// RFC 3339 lets the T and the Z be lowercase; Go's layout does not.
	t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(vs[0]))
	if err != nil {
		return nil, apierr.BadRequest("parameter %s must be an RFC 3339 time", name)
	}
	return &t, nil
}

// encodeCursor and decodeCursor: the order (n or r) and the key, base64url.
func encodeCursor(relevance bool, k searchKey) string {
	b := make([]byte, 1, 29)
	b[0] = 'n'
	if relevance {
		b[0] = 'r'
	}
	b = binary.BigEndian.AppendUint32(b, math.Float32bits(k.rank))
	b = binary.BigEndian.AppendUint64(b, uint64(k.at))
	b = binary.BigEndian.AppendUint64(b, uint64(k.cid))
	b = binary.BigEndian.AppendUint64(b, uint64(k.seq))
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, relevance bool) (*searchKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	want := byte('n')
	if relevance {
		want = 'r'
	}
	if err != nil || len(b) != 29 || b[0] != want {
		return nil, apierr.BadRequest("cursor is not one this search issued")
	}
	k := &searchKey{
		rank: math.Float32frombits(binary.BigEndian.Uint32(b[1:])),
		at:   int64(binary.BigEndian.Uint64(b[5:])),
		cid:  int64(binary.BigEndian.Uint64(b[13:])),
		seq:  int64(binary.BigEndian.Uint64(b[21:])),
	}
	// A made-up cursor may hold any bits: a time PostgreSQL cannot hold
	// or negative ids would fail the query instead of being refused.
	if y := time.UnixMicro(k.at).UTC().Year(); y < 1 || y > 9999 || k.cid < 0 || k.seq < 0 ||
		math.IsNaN(float64(k.rank)) || math.IsInf(float64(k.rank), 0) {
		return nil, apierr.BadRequest("cursor is not one this search issued")
	}
	return k, nil
}

// searchQueryOf reads the question of GET /v1/search.
func searchQueryOf(r *http.Request) (*searchQuery, error) {
	q := r.URL.Query()
	vs, ok := q["q"]
	switch {
	case !ok || len(vs) == 0 || strings.TrimSpace(vs[0]) == "":
		return nil, apierr.BadRequest("q is required and must hold a word")
	case len(vs) > 1:
		return nil, apierr.BadRequest("parameter q given more than once")
	case len(vs[0]) > searchMaxQuery:
		return nil, apierr.BadRequest("q is %d bytes, at most %d", len(vs[0]), searchMaxQuery)
	case !utf8.ValidString(vs[0]) || strings.ContainsRune(vs[0], 0):
		return nil, apierr.BadRequest("q must be UTF-8 without NUL")
	}
	prefix, err := queryBool(q, "prefix", true)
	if err != nil {
		return nil, err
	}
	sq := &searchQuery{}
	if sq.terms, err = parseSearchTerms(vs[0], prefix); err != nil {
		return nil, err
	}
	if sq.cid, err = queryInt(q, "conversation_id", 0, 1, math.MaxInt64); err != nil {
		return nil, err
	}
	if sq.sender, err = queryInt(q, "sender_id", -1, 0, math.MaxInt64); err != nil {
		return nil, err
	}
	if sq.after, err = queryTime(q, "after"); err != nil {
		return nil, err
	}
	if sq.before, err = queryTime(q, "before"); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		name string
		dst  **int64
	}{{"after_seq", &sq.afterSeq}, {"before_seq", &sq.beforeSeq}} {
		if _, ok := q[p.name]; !ok {
			continue
		}
		if sq.cid == 0 {
			return nil, apierr.BadRequest("%s needs conversation_id", p.name)
		}
		v, err := queryInt(q, p.name, 0, 0, math.MaxInt64)
		if err != nil {
			return nil, err
		}
		*p.dst = &v
	}
	if _, ok := q["has_attachment"]; ok {
		v, err := queryBool(q, "has_attachment", false)
		if err != nil {
			return nil, err
		}
		sq.hasAttachment = &v
	}
	if sq.mentionsMe, err = queryBool(q, "mentions_me", false); err != nil {
		return nil, err
	}
	switch os := q["order"]; {
	case len(os) == 0 || (len(os) == 1 && os[0] == "newest"):
	case len(os) == 1 && os[0] == "relevance":
		sq.relevance = true
	default:
		return nil, apierr.BadRequest("order must be newest or relevance, once")
	}
	limit, err := queryInt(q, "limit", searchDefLimit, 1, searchMaxLimit)
	if err != nil {
		return nil, err
	}
	sq.limit = int(limit)
	if cs, ok := q["cursor"]; ok {
		if len(cs) != 1 {
			return nil, apierr.BadRequest("parameter cursor given more than once")
		}
		if sq.cursor, err = decodeCursor(cs[0], sq.relevance); err != nil {
			return nil, err
		}
	}
	return sq, nil
}

// searchSQL builds the statements of sq for user: the page (limit+1
// rows, each with its rank and headline) and the capped count. Every
// value is a parameter; only the shape depends on sq.
func searchSQL(sq *searchQuery, user int64, blocked []int64) (page string, args []any) {
	args = []any{user}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var tsq []string
	for _, t := range sq.terms {
		f := [...]string{termWord: "plainto_tsquery", termPhrase: "phraseto_tsquery", termPrefix: "to_tsquery"}[t.kind]
		tsq = append(tsq, f+"(inboxd_search.config(), "+arg(t.text)+"::text)")
	}
	conds := []string{"s.user_id = $1", "m.search_vector @@ q.q"}
	if sq.cid != 0 {
		conds = append(conds, "s.conversation_id = "+arg(sq.cid))
	}
	if sq.sender >= 0 {
		conds = append(conds, "m.sender_id = "+arg(sq.sender))
	}
	if sq.after != nil {
		conds = append(conds, "m.created_at > "+arg(*sq.after))
	}
	if sq.before != nil {
		conds = append(conds, "m.created_at < "+arg(*sq.before))
	}
	if sq.afterSeq != nil {
		conds = append(conds, "m.seq > "+arg(*sq.afterSeq))
	}
	if sq.beforeSeq != nil {
		conds = append(conds, "m.seq < "+arg(*sq.beforeSeq))
	}
	if sq.hasAttachment != nil {
		not := ""
		if !*sq.hasAttachment {
			not = "NOT "
		}
		conds = append(conds, not+"coalesce(jsonb_array_length(m.attachments) > 0, false)")
	}
	if sq.mentionsMe {
		conds = append(conds, "(m.mention_all OR $1 = ANY(m.mentions))")
	}
	if len(blocked) > 0 {
		conds = append(conds, "m.sender_id <> ALL("+arg(blocked)+"::bigint[])")
	}
	const rank = "ts_rank(m.search_vector, q.q)"
	order := "m.created_at DESC, m.conversation_id DESC, m.seq DESC"
	key := "(m.created_at, m.conversation_id, m.seq)"
	if sq.relevance {
		order = rank + " DESC, " + order
		key = "(" + rank + ", m.created_at, m.conversation_id, m.seq)"
	}
	if c := sq.cursor; c != nil {
		at := time.UnixMicro(c.at)
		val := "(" + arg(at) + "::timestamptz, " + arg(c.cid) + "::bigint, " + arg(c.seq) + "::bigint)"
		if sq.relevance {
			val = "(" + arg(c.rank) + "::real, " + val[1:]
		}
		conds = append(conds, key+" < "+val)
	}
	query := "SELECT " + strings.Join(tsq, " && ") + " AS q"
	from := `FROM (` + query + `) q, member_spans s
JOIN messages m ON m.conversation_id = s.conversation_id AND m.seq >= s.joined_seq
	AND m.seq <= COALESCE(s.left_seq, 9223372036854775807)`
	// The first page counts every match in the same pass (the sort
	// reads them all anyway); a later one has no total.
	total := "0::bigint"
	if sq.cursor == nil {
		total = "count(*) OVER ()"
	}
	page = `SELECT ` + rows.MessageColsFor("$1") + `, m.rank, m.total, ts_headline(inboxd_search.config(), m.body, m.q,
	'StartSel=` + markStart + `, StopSel=` + markStop + `, MaxWords=35, MinWords=15, ShortWord=2')
FROM (SELECT m.*, ` + rank + ` AS rank, ` + total + ` AS total, q.q ` + from + `
	WHERE ` + strings.Join(conds, " AND ") + `
	ORDER BY ` + order + ` LIMIT ` + arg(sq.limit+1) + `) m
ORDER BY ` + strings.ReplaceAll(order, rank, "m.rank")
	return page, args
}

// searchHit is one row of a server's page.
type searchHit struct {
	key    searchKey
	result protocol.SearchResult
}

// snippetOf turns a headline into segments.
func snippetOf(h string) []protocol.SnippetPart {
	parts := []protocol.SnippetPart{}
	for h != "" {
		i := strings.Index(h, markStart)
		if i < 0 {
			parts = append(parts, protocol.SnippetPart{Text: h})
			break
		}
		if i > 0 {
			parts = append(parts, protocol.SnippetPart{Text: h[:i]})
		}
		h = h[i+len(markStart):]
		j := strings.Index(h, markStop)
		if j < 0 {
			j = len(h)
		}
		if j > 0 {
			parts = append(parts, protocol.SnippetPart{Text: h[:j], Match: true})
		}
		h = strings.TrimPrefix(h[j:], markStop)
	}
	return parts
}

// searchServer runs sq on one server: its page (up to limit+1 hits, in
// order) and, on a first page, its count of matches.
func (g *Gateway) searchServer(ctx context.Context, srv int, page string, args []any) ([]searchHit, int64, error) {
	var hits []searchHit
	var n int64
	err := pgx.BeginFunc(ctx, g.srv.Pools[srv], func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`,
			strconv.FormatInt(g.cfg.SearchTimeout.Milliseconds(), 10)); err != nil {
			return err
		}
		// Planned afresh each time (no cached statement): the plan folds
		// inboxd_search.config() to a constant, and PostgreSQL does not
		// invalidate a cached plan when inboxd migrate --search-config
		// redefines it.
		rs, err := tx.Query(ctx, page, append([]any{pgx.QueryExecModeExec}, args...)...)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var s rows.MessageScan
			var rank float32
			var headline string
			if err := rs.Scan(append(s.Targets(), &rank, &n, &headline)...); err != nil {
				return err
			}
			m := s.Message()
			hits = append(hits, searchHit{
				key:    searchKey{rank: rank, at: m.CreatedAt.UnixMicro(), cid: m.ConversationID, seq: m.Seq},
				result: protocol.SearchResult{Message: *m, Snippet: snippetOf(headline), Rank: float64(rank)},
			})
		}
		return rs.Err()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("search on server %d: %w", srv+1, err)
	}
	return hits, n, nil
}

// compareHits orders hits as the search does: rank first in relevance
// order, then newest, then by conversation and seq, all descending.
func compareHits(relevance bool) func(a, b searchHit) int {
	return func(a, b searchHit) int {
		if relevance {
			if c := cmp.Compare(b.key.rank, a.key.rank); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(b.key.at, a.key.at); c != 0 {
			return c
		}
		if c := cmp.Compare(b.key.cid, a.key.cid); c != 0 {
			return c
		}
		return cmp.Compare(b.key.seq, a.key.seq)
	}
}

// search answers sq for user: on every server (the ones not holding any
// of the user's conversations answer nothing at once), merged.
func (g *Gateway) search(ctx context.Context, user int64, sq *searchQuery) (*protocol.SearchResults, error) {
	out := &protocol.SearchResults{Results: []protocol.SearchResult{}}
	first := sq.cursor == nil
	if first {
		out.EstimatedTotal = new(int64)
	}
	if len(sq.terms) == 0 {
		return out, nil
	}
	blocked, err := g.blocks.of(ctx, user)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, 0, len(blocked))
	for id := range blocked {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	page, args := searchSQL(sq, user, ids)
	servers := []int{0}
	if sq.cid != 0 {
		servers[0] = g.srv.OfConv(sq.cid)
	} else {
		servers = servers[:0]
		for i := range g.srv.Pools {
			servers = append(servers, i)
		}
	}
	hits := make([][]searchHit, len(servers))
	counts := make([]int64, len(servers))
	eg, ectx := errgroup.WithContext(ctx)
	for i, srv := range servers {
		eg.Go(func() (err error) {
			hits[i], counts[i], err = g.searchServer(ectx, srv, page, args)
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	all := slices.Concat(hits...)
	slices.SortFunc(all, compareHits(sq.relevance))
	more := len(all) > sq.limit
	if more {
		all = all[:sq.limit]
		out.NextCursor = encodeCursor(sq.relevance, all[len(all)-1].key)
	}
	for _, h := range all {
		out.Results = append(out.Results, h.result)
	}
	if first {
		for _, n := range counts {
			*out.EstimatedTotal += n
		}
	}
	return out, nil
}

// handleSearch is GET /v1/search.
func (g *Gateway) handleSearch(w http.ResponseWriter, r *http.Request) error {
	sq, err := searchQueryOf(r)
	if err != nil {
		return err
	}
	res, err := g.search(r.Context(), userFrom(r.Context()), sq)
	if err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusOK, res)
	return nil
}
