package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// The text of the search figure: chat-like messages drawn word by word from
// a vocabulary with a Zipf distribution (a word's frequency falls as a
// power of its rank), so that a few words are in most messages and most
// words in a few, as in real text; a share of the messages is Chinese,
// Japanese or Korean. Everything is drawn from seeded generators: the same
// sizes give the same text.

// chatWords are the first ranks of the vocabulary, in rough order of
// frequency in chat; generated words follow them.
var chatWords = strings.Fields(`the i you to a and it is that we for on in this be have do not can will
	are at with just so but me my your what if get was of ok all there they he she how when
	meeting tomorrow today please thanks time call send file project team review update check
	release deploy bug fix test build server client customer invoice report draft budget week
	monday friday morning afternoon lunch coffee office home late soon later sure okay great good
	yes no maybe let know think need want see look make take come go going done ready working still
	already again also back new first last next one two three some any more about from here them
	who which where why did had could would should been being then than now out up down over into
	after before because while until agenda slides notes doc docs link email phone number
	address price order shipping account password login error issue ticket support question answer
	plan idea feedback change version branch merge commit pipeline staging production database
	backup restore cache queue latency memory disk network cluster node metrics alert incident
	outage postmortem sprint standup retro demo launch roadmap design mockup prototype feature`)

// cjkWords are the CJK words, by rank within their language.
var cjkWords = map[string][]string{
	"zh": strings.Fields(`会议 我们 今天 明天 时间 问题 可以 没有 什么 知道 工作 项目 已经 现在 需要 一下 大家 谢谢
		觉得 还是 因为 所以 如果 应该 客户 方案 下午 上午 晚上 周末 文件 看看 发给 确认 安排 讨论 准备
		完成 测试 上线 版本 数据 系统 用户 功能 设计 报告 邮件 电话 地址`),
	"ja": strings.Fields(`会議 ありがとう よろしく お願いします 明日 今日 確認 資料 時間 大丈夫 了解 送ります 予定 担当
		東京 電車 遅れます すみません 本当に 楽しみ`),
	"ko": strings.Fields(`회의 안녕하세요 감사합니다 내일 오늘 확인 자료 시간 괜찮아요 알겠습니다 보내드릴게요 일정 담당
		서울 지하철 죄송합니다 정말 기대돼요`),
}

// searchVocabulary is chatWords followed by generated pronounceable words,
// n in all (at least the chat words); the same n gives the same words.
func searchVocabulary(n int) []string {
	var words []string
	seen := map[string]bool{}
	for _, w := range chatWords {
		if !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	const cons, vows = "bcdfghjklmnprstvwz", "aeiou"
	r := rand.New(rand.NewPCG(7, 11))
	var b strings.Builder
	for len(words) < n {
		b.Reset()
		for s := 2 + r.IntN(2); s > 0; s-- {
			b.WriteByte(cons[r.IntN(len(cons))])
			b.WriteByte(vows[r.IntN(len(vows))])
		}
		if r.IntN(3) == 0 {
			b.WriteByte(cons[r.IntN(len(cons))])
		}
		if w := b.String(); !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	return words
}

// zipfS is the exponent of the words' distribution: the frequency of the
// word of rank r is proportional to r^-zipfS, about that of English.
const zipfS = 1.1

// textGen draws message bodies. Not safe for concurrent use: each
// goroutine has its own (newTextGen with its own seed).
type textGen struct {
	r        *rand.Rand
	vocab    []string
	words    *rand.Zipf
	cjk      map[string]*rand.Zipf
	cjkShare float64
	b        strings.Builder
}

func newTextGen(vocab []string, cjkShare float64, seed uint64) *textGen {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	g := &textGen{r: r, vocab: vocab, cjkShare: cjkShare, cjk: map[string]*rand.Zipf{},
		words: rand.NewZipf(r, zipfS, 1, uint64(len(vocab)-1))}
	for lang, ws := range cjkWords {
		g.cjk[lang] = rand.NewZipf(r, zipfS, 1, uint64(len(ws)-1))
	}
	return g
}

// body returns one message: 3 to 18 words with some punctuation, or, for
// a cjkShare of them, a Chinese, Japanese or Korean one.
func (g *textGen) body() string {
	g.b.Reset()
	if g.r.Float64() < g.cjkShare {
		lang, sep, end := "zh", "", "。"
		switch x := g.r.IntN(20); {
		case x >= 17:
			lang, sep, end = "ko", " ", "."
		case x >= 12:
			lang = "ja"
		}
		ws, z := cjkWords[lang], g.cjk[lang]
		for i, n := 0, 3+g.r.IntN(8); i < n; i++ {
			if i > 0 {
				g.b.WriteString(sep)
				if sep == "" && g.r.IntN(5) == 0 {
					g.b.WriteString("，")
				}
			}
			g.b.WriteString(ws[z.Uint64()])
		}
		g.b.WriteString(end)
		return g.b.String()
	}
	for i, n := 0, 3+g.r.IntN(16); i < n; i++ {
		if i > 0 {
			if g.r.IntN(12) == 0 {
				g.b.WriteByte(',')
			}
			g.b.WriteByte(' ')
		}
		g.b.WriteString(g.vocab[g.words.Uint64()])
	}
	g.b.WriteString([...]string{"", "", ".", "?", "!"}[g.r.IntN(5)])
	return g.b.String()
}

// searchData is the projection of the search figure, written directly with
// COPY in the shape the fanout gives it: Conversations conversations of
// Members members, each with its creation (a system message) and
// PerConversation text messages; Users users, each a member of about
// MemberOf conversations, the target (user 1) among them. The
// conversations, their modes, the membership spans, the users and their
// records are written as the projection writes them; the inbox is not
// (search does not read it).
type searchData struct {
	Conversations   int   `json:"conversations"`
	Members         int   `json:"members"`
	Users           int   `json:"users"`
	PerConversation int   `json:"text_messages_per_conversation"`
	Messages        int64 `json:"text_messages"`
	// Start is the first message's time; each next message (over all
	// conversations, in turn) is Step later.
	Start time.Time     `json:"start"`
	Step  time.Duration `json:"step"`
}

// searchTarget is the user whose searches are timed.
const searchTarget int64 = 1

// newSearchData lays out messages text messages in conversations
// conversations of members members, with users such that every user is
// in about memberOf of them: member k of conversation c is user
// (c + k*stride) mod users + 1.
func newSearchData(messages, conversations, members, memberOf int) searchData {
	d := searchData{Conversations: conversations, Members: members,
		Users: max(2*members, conversations*members/max(1, memberOf))}
	d.PerConversation = max(1, messages/conversations)
	d.Messages = int64(d.PerConversation) * int64(conversations)
	// 90 days of messages, ending an hour ago.
	span := 90 * 24 * time.Hour
	d.Step = span / time.Duration(d.Messages)
	d.Start = time.Now().UTC().Add(-span - time.Hour).Truncate(time.Second)
	return d
}

func (d searchData) membersOf(c int) []int64 {
	stride := d.Users / d.Members
	out := make([]int64, d.Members)
	for k := range out {
		out[k] = int64((c+k*stride)%d.Users) + 1
	}
	return out
}

// at is the time of text message j (1-based) of conversation c (0-based).
func (d searchData) at(c, j int) time.Time {
	return d.Start.Add(time.Duration(int64(j-1)*int64(d.Conversations)+int64(c)) * d.Step)
}

// seed fills the migrated, empty database of pool. The messages are
// copied in batches of conversations, two at a time (PostgreSQL computes
// the search column of every row, which takes most of the time), with the
// search index and the other secondary indexes of messages dropped and
// built again at the end, as a bulk load does; build gets the seconds
// of the search index's build and of the message id index's.
func (d searchData) seed(ctx context.Context, pool *pgxpool.Pool, vocab []string, cjkShare float64, progress io.Writer) (build searchBuild, err error) {
	// The secondary indexes of messages (none backs a constraint).
	type index struct{ name, def string }
	var idx []index
	rows, err := pool.Query(ctx, `SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'messages'::regclass AND NOT i.indisprimary
			AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)`)
	if err != nil {
		return build, err
	}
	for rows.Next() {
		var x index
		if err := rows.Scan(&x.name, &x.def); err != nil {
			return build, err
		}
		idx = append(idx, x)
	}
	if err := rows.Err(); err != nil {
		return build, err
	}
	for _, x := range idx {
		if _, err := pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{x.name}.Sanitize()); err != nil {
			return build, fmt.Errorf("drop index %s: %w", x.name, err)
		}
	}

	if err := d.copyConversations(ctx, pool); err != nil {
		return build, err
	}
	// The messages, in batches of conversations.
	batch := max(1, 100_000/(d.PerConversation+1))
	var copied atomic.Int64
	t0 := time.Now()
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(2)
	for c0 := 0; c0 < d.Conversations; c0 += batch {
		c1 := min(c0+batch, d.Conversations)
		eg.Go(func() error {
			n, err := d.copyMessages(ectx, pool, vocab, cjkShare, c0, c1)
			if err != nil {
				return fmt.Errorf("copy the messages of conversations %d-%d: %w", c0+1, c1, err)
			}
			done := copied.Add(n)
			progressf(progress, "bench search: %s/%s messages copied, %s/s", num(float64(done)),
				num(float64(d.Messages+int64(d.Conversations))), num(float64(done)/time.Since(t0).Seconds()))
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return build, err
	}
	build.CopySeconds = time.Since(t0).Seconds()

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return build, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET maintenance_work_mem = '512MB'`); err != nil {
		return build, err
	}
	for _, x := range idx {
		t := time.Now()
		if _, err := conn.Exec(ctx, x.def); err != nil {
			return build, fmt.Errorf("build index %s: %w", x.name, err)
		}
		secs := time.Since(t).Seconds()
		progressf(progress, "bench search: index %s built in %.1fs", x.name, secs)
		switch x.name {
		case "messages_search":
			build.SearchSeconds = secs
		case "messages_msg_id":
			build.MsgIDSeconds = secs
		}
	}
	return build, nil
}

// searchBuild is what the bulk load of the search figure took.
type searchBuild struct {
	CopySeconds   float64 `json:"copy_seconds"`
	SearchSeconds float64 `json:"search_index_build_seconds"`
	MsgIDSeconds  float64 `json:"msg_id_index_build_seconds"`
}

// copyConversations writes the conversations, their modes and member
// spans, the users and their records.
func (d searchData) copyConversations(ctx context.Context, pool *pgxpool.Pool) error {
	created := d.Start.Add(-time.Hour)
	lastSeq := int64(d.PerConversation + 1)
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		c := 0
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"conversations"}, []string{"id", "title", "created_by", "owner_id",
			"created_at", "last_seq", "last_at", "text_count", "member_count"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if c == d.Conversations {
					return nil, nil
				}
				c++
				creator := d.membersOf(c - 1)[0]
				return []any{int64(c), fmt.Sprintf("conversation %d", c), creator, creator, created,
					lastSeq, d.at(c-1, d.PerConversation), lastSeq - 1, int64(d.Members)}, nil
			}))
		if err != nil {
			return fmt.Errorf("copy conversations: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO conversation_modes (conversation_id, from_seq, read_fanout)
			SELECT id, 1, false FROM conversations`); err != nil {
			return fmt.Errorf("conversation modes: %w", err)
		}
		// Spans, and each user's conversations for the records.
		var spans [][]any
		convs := make([][]int64, d.Users+1)
		for c := 0; c < d.Conversations; c++ {
			for k, u := range d.membersOf(c) {
				role := "member"
				if k == 0 {
					role = "owner"
				}
				spans = append(spans, []any{int64(c + 1), u, int64(1), role})
				convs[u] = append(convs[u], int64(c+1))
			}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"member_spans"}, []string{"conversation_id", "user_id", "joined_seq", "role"},
			pgx.CopyFromRows(spans)); err != nil {
			return fmt.Errorf("copy member_spans: %w", err)
		}
		var users, records [][]any
		for u := 1; u <= d.Users; u++ {
			users = append(users, []any{int64(u), int64(0), int64(0), int64(len(convs[u]))})
			for v, c := range convs[u] {
				records = append(records, []any{int64(u), c, int64(1), int64(v + 1)})
			}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"users"}, []string{"id", "inbox_seq", "inbox_floor", "record_version"},
			pgx.CopyFromRows(users)); err != nil {
			return fmt.Errorf("copy users: %w", err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"records"}, []string{"user_id", "conversation_id", "read_seq", "version"},
			pgx.CopyFromRows(records)); err != nil {
			return fmt.Errorf("copy records: %w", err)
		}
		return nil
	})
}

// copyMessages copies the messages of conversations [c0, c1) and returns
// how many.
func (d searchData) copyMessages(ctx context.Context, pool *pgxpool.Pool, vocab []string, cjkShare float64, c0, c1 int) (int64, error) {
	g := newTextGen(vocab, cjkShare, uint64(c0)+1)
	c, seq := c0, int64(0)
	last := int64(d.PerConversation + 1)
	var members []int64
	n, err := pool.CopyFrom(ctx, pgx.Identifier{"messages"}, []string{"conversation_id", "seq", "msg_id", "sender_id", "kind", "body", "created_at", "ord"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if seq == last {
				c, seq = c+1, 0
			}
			if c == c1 {
				return nil, nil
			}
			seq++
			if seq == 1 {
				members = d.membersOf(c)
				body, _ := json.Marshal(map[string]any{"event": "conversation.created", "by": members[0],
					"title": fmt.Sprintf("conversation %d", c+1), "members": members})
				return []any{int64(c + 1), seq, uuid.New(), members[0], "system", string(body), d.Start.Add(-time.Hour), int64(0)}, nil
			}
			return []any{int64(c + 1), seq, uuid.New(), members[int(seq)%len(members)], "text", g.body(),
				d.at(c, int(seq-1)), seq - 1}, nil
		}))
	return n, err
}
