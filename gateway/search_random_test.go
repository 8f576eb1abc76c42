package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// The vocabulary of the random corpus: words that share prefixes, and
// CJK runs (found by substring).
var searchVocab = []string{"apple", "apricot", "april", "banana", "band", "bandit", "cherry", "chess",
	"delta", "dog", "dot", "echo", "Apple", "BAND", "中文搜索", "学习中文", "日本語のテキスト", "한국어", "搜索引擎"}

// searchModel is what the test knows of the corpus: each message's
// current text and whether it is deleted, by (conversation, seq).
type searchModel struct {
	mu      sync.Mutex
	text    map[[2]int64]string
	sender  map[[2]int64]int64
	deleted map[[2]int64]bool
	blocks  map[int64]map[int64]bool // blocker -> blocked
}

func newSearchModel() *searchModel {
	return &searchModel{text: map[[2]int64]string{}, sender: map[[2]int64]int64{},
		deleted: map[[2]int64]bool{}, blocks: map[int64]map[int64]bool{}}
}

func (m *searchModel) sent(msg protocol.Message, body string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]int64{msg.ConversationID, msg.Seq}
	m.text[k], m.sender[k] = body, msg.SenderID
}

// searchQ is one query of the test: its parameters and its meaning.
type searchQ struct {
	params url.Values
	match  func(tokens []string) bool
	cid    int64 // filters; 0 and -1 when absent
	sender int64
	after  *time.Time
	before *time.Time
}

func randomSentence(rng *rand.Rand) string {
	n := 1 + rng.IntN(6)
	ws := make([]string, n)
	for i := range ws {
		ws[i] = searchVocab[rng.IntN(len(searchVocab))]
	}
	return strings.Join(ws, " ")
}

func tokensOf(text string) []string {
	return strings.Fields(strings.ToLower(text))
}

func hasCJK(s string) bool { return strings.IndexFunc(s, isCJK) >= 0 }

// randomSearchQ makes a query of one of the forms the protocol names,
// with its meaning over a message's tokens.
func randomSearchQ(rng *rand.Rand, cids []int64, users []int64, from, to time.Time) searchQ {
	word := func() string {
		for {
			if w := strings.ToLower(searchVocab[rng.IntN(len(searchVocab))]); !hasCJK(w) {
				return w
			}
		}
	}
	cjk := func() string {
		for {
			w := []rune(searchVocab[rng.IntN(len(searchVocab))])
			if hasCJK(string(w)) {
				i := rng.IntN(len(w))
				j := i + 1 + rng.IntN(len(w)-i)
				return string(w[i:j])
			}
		}
	}
	has := func(pred func(string) bool) func([]string) bool {
		return func(ts []string) bool { return slices.ContainsFunc(ts, pred) }
	}
	q := searchQ{params: url.Values{}, cid: 0, sender: -1}
	switch rng.IntN(5) {
	case 0: // a whole word
		w := word()
		q.params.Set("q", w)
		q.params.Set("prefix", "false")
		q.match = has(func(t string) bool { return t == w })
	case 1: // a prefix, as typed
		w := word()
		p := w[:1+rng.IntN(len(w))]
		q.params.Set("q", strings.ToUpper(p[:1])+p[1:])
		q.match = has(func(t string) bool { return strings.HasPrefix(t, p) })
	case 2: // two words, the last complete
		a, b := word(), word()
		q.params.Set("q", a+"  "+b+" ")
		q.match = func(ts []string) bool { return slices.Contains(ts, a) && slices.Contains(ts, b) }
	case 3: // a phrase
		a, b := word(), word()
		q.params.Set("q", `"`+a+" "+b+`"`)
		q.match = func(ts []string) bool {
			for i := 0; i+1 < len(ts); i++ {
				if ts[i] == a && ts[i+1] == b {
					return true
				}
			}
			return false
		}
	case 4: // a CJK substring
		s := cjk()
		q.params.Set("q", s)
		q.match = has(func(t string) bool { return strings.Contains(t, s) })
	}
	at := from.Add(time.Duration(rng.Int64N(int64(to.Sub(from)) + 1)))
	switch rng.IntN(8) {
	case 0:
		q.cid = cids[rng.IntN(len(cids))]
		q.params.Set("conversation_id", fmt.Sprint(q.cid))
	case 1:
		q.sender = users[rng.IntN(len(users))]
		q.params.Set("sender_id", fmt.Sprint(q.sender))
	case 2:
		q.after = &at
		q.params.Set("after", at.Format(time.RFC3339Nano))
	case 3:
		q.before = &at
		q.params.Set("before", at.Format(time.RFC3339Nano))
	}
	if rng.IntN(3) == 0 {
		q.params.Set("order", "relevance")
	}
	return q
}

// searchAll reads every page of q as u, checking the order within and
// across pages; it returns the (conversation, seq) found and the
// first page's estimate.
func (u *user) searchAll(t testing.TB, params url.Values, limit int) ([][2]int64, int64) {
	t.Helper()
	params = cloneValues(params)
	params.Set("limit", fmt.Sprint(limit))
	var found [][2]int64
	var total int64 = -1
	var last *protocol.SearchResult
	relevance := params.Get("order") == "relevance"
	for page := 0; ; page++ {
		r := u.do(t, "GET", "/v1/search?"+params.Encode(), nil)
		require.Equal(t, http.StatusOK, r.status, "search %v: %s", params, r)
		var res protocol.SearchResults
		r.decode(t, &res)
		if page == 0 {
			require.NotNil(t, res.EstimatedTotal, "the first page has an estimate")
			total = *res.EstimatedTotal
		} else {
			require.Nil(t, res.EstimatedTotal, "a later page has none")
		}
		require.LessOrEqual(t, len(res.Results), limit)
		for i := range res.Results {
			cur := &res.Results[i]
			if last != nil {
				if relevance {
					require.GreaterOrEqual(t, last.Rank, cur.Rank, "relevance order")
				}
				if !relevance || last.Rank == cur.Rank {
					require.False(t, cur.Message.CreatedAt.After(last.Message.CreatedAt), "newest first")
				}
			}
			last = cur
			found = append(found, [2]int64{cur.Message.ConversationID, cur.Message.Seq})
		}
		if res.NextCursor == "" {
			return found, total
		}
		params.Set("cursor", res.NextCursor)
	}
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

// visibleOf is what history shows u of each conversation (the oracle of
// visibility: docs/protocol.md defines search by it).
func (u *user) visibleOf(t testing.TB, cids []int64) map[[2]int64]protocol.Message {
	t.Helper()
	out := map[[2]int64]protocol.Message{}
	for _, cid := range cids {
		after := int64(0)
		for {
			r := u.do(t, "GET", fmt.Sprintf("/v1/conversations/%d/messages?after=%d&limit=200", cid, after), nil)
			if r.status == http.StatusForbidden {
				break
			}
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			var h protocol.History
			r.decode(t, &h)
			for _, m := range h.Messages {
				out[[2]int64{cid, m.Seq}] = m
				after = m.Seq
			}
			if !h.HasMore {
				break
			}
		}
	}
	return out
}

// TestSearchRandomized: members send, edit, delete, join and leave (and
// one user blocks another); then, for every user and query, the search
// equals a model: the messages history shows the user, not deleted, not
// of a blocked sender, whose current text the query matches.
// Exhaustive over a small corpus (every query form, every user), on a
// sample over a larger one.
func TestSearchRandomized(t *testing.T) {
	for _, tc := range []struct {
		name            string
		steps, queries  int
		senders, limit  int
		exhaustiveUsers bool
	}{
		{"small", 220, 150, 1, 4, true},
		{"large", 2400, 60, 6, 25, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			tg := newGateway(t, nil)
			userIDs := []int64{1, 2, 3, 4, 5, 6}
			users := map[int64]*user{}
			for _, id := range userIDs {
				users[id] = tg.user(t, id)
			}
			model := newSearchModel()
			// Conversations with random owners and members; members
			// tracks who is in each now.
			var cids []int64
			members := map[int64]map[int64]bool{}
			owner := map[int64]int64{}
			for i := 0; i < 4; i++ {
				o := userIDs[rng.IntN(len(userIDs))]
				var others []int64
				for _, id := range userIDs {
					if id != o && rng.IntN(2) == 0 {
						others = append(others, id)
					}
				}
				cid := users[o].create(t, fmt.Sprintf("c%d", i), others...)
				cids = append(cids, cid)
				owner[cid] = o
				members[cid] = map[int64]bool{o: true}
				for _, id := range others {
					members[cid][id] = true
				}
			}
			// User 6 blocks user 2 once the conversations exist (a
			// blocked user cannot add its blocker, so 2 never adds 6).
			r := users[6].do(t, "PUT", "/v1/blocks/2", nil)
			require.Contains(t, []int{202, 204}, r.status, "%s", r)
			users[6].waitBlocks(t, 2)
			model.blocks[6] = map[int64]bool{2: true}

			var mine [][2]int64 // sent messages, for edits and deletes
			var mu sync.Mutex
			// membersOf is a random conversation and its members now.
			membersOf := func(rng *rand.Rand) (int64, []int64) {
				cid := cids[rng.IntN(len(cids))]
				mu.Lock()
				defer mu.Unlock()
				var in []int64
				for id := range members[cid] {
					in = append(in, id)
				}
				slices.Sort(in)
				return cid, in
			}
			step := func(rng *rand.Rand) {
				cid, in := membersOf(rng)
				switch k := rng.IntN(20); {
				case k < 14: // send
					s := in[rng.IntN(len(in))]
					body := randomSentence(rng)
					m := users[s].send(t, cid, body)
					model.sent(m, body)
					mu.Lock()
					mine = append(mine, [2]int64{cid, m.Seq})
					mu.Unlock()
				case k < 16: // edit or delete a message by its sender
					mu.Lock()
					if len(mine) == 0 {
						mu.Unlock()
						return
					}
					key := mine[rng.IntN(len(mine))]
					mu.Unlock()
					model.mu.Lock()
					s, gone := model.sender[key], model.deleted[key]
					model.mu.Unlock()
					if gone {
						return
					}
					if k == 14 {
						body := randomSentence(rng)
						r := users[s].do(t, "PATCH", msgPath(key[0], key[1]), map[string]any{"change_id": uuid.NewString(), "body": body})
						if r.status == http.StatusOK {
							model.mu.Lock()
							model.text[key] = body
							model.mu.Unlock()
						} else {
							// The sender left since (403), or left and came
							// back and no longer sees it (404).
							require.Contains(t, []int{http.StatusForbidden, http.StatusNotFound}, r.status, "%s", r)
						}
						return
					}
					r := users[s].do(t, "DELETE", msgPath(key[0], key[1]), map[string]any{"change_id": uuid.NewString()})
					if r.status == http.StatusOK {
						model.mu.Lock()
						model.deleted[key] = true
						model.mu.Unlock()
					} else {
						require.Contains(t, []int{http.StatusForbidden, http.StatusNotFound}, r.status, "%s", r)
					}
				default: // membership: the owner adds or removes, a member leaves
					o := owner[cid]
					cand := userIDs[rng.IntN(len(userIDs))]
					if cand == o || (o == 2 && cand == 6) {
						return
					}
					mu.Lock()
					in := members[cid][cand]
					mu.Unlock()
					if in {
						if len(members[cid]) <= 2 {
							return
						}
						actor := users[o]
						if rng.IntN(2) == 0 {
							actor = users[cand]
						}
						r := actor.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/%d", cid, cand), nil)
						require.Contains(t, []int{200, 202}, r.status, "%s", r)
						mu.Lock()
						delete(members[cid], cand)
						mu.Unlock()
						return
					}
					r := users[o].do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), map[string]any{"user_id": cand})
					require.Contains(t, []int{200, 202}, r.status, "%s", r)
					mu.Lock()
					members[cid][cand] = true
					mu.Unlock()
				}
			}
			if tc.senders == 1 {
				for i := 0; i < tc.steps; i++ {
					step(rng)
				}
			} else {
				// Several senders at once; membership changes stay with
				// the first so that the model's members follow the log.
				var wg sync.WaitGroup
				for w := 0; w < tc.senders; w++ {
					wrng := rand.New(rand.NewPCG(seed, uint64(100+w)))
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < tc.steps/tc.senders; i++ {
							if w > 0 {
								cid, in := membersOf(wrng)
								s := in[wrng.IntN(len(in))]
								body := randomSentence(wrng)
								m, err := users[s].sendE(cid, body)
								if err != nil {
									continue // removed meanwhile: refused
								}
								model.sent(m, body)
								continue
							}
							step(wrng)
						}
					}()
				}
				wg.Wait()
			}
			tg.env.WaitCaughtUp(t, time.Minute)
			tg.verify(t)

			visible := map[int64]map[[2]int64]protocol.Message{}
			for _, id := range userIDs {
				visible[id] = users[id].visibleOf(t, cids)
				for k, m := range visible[id] {
					if m.Kind != protocol.MessageText || m.Deleted || m.SenderBlocked {
						continue
					}
					model.mu.Lock()
					want, known := model.text[k]
					model.mu.Unlock()
					if known && !model.deleted[k] {
						require.Equal(t, want, msgText(t, m), "history and the model agree on %v", k)
					}
				}
			}
			expect := func(uid int64, q searchQ) [][2]int64 {
				var out [][2]int64
				for k, m := range visible[uid] {
					if m.Kind != protocol.MessageText || m.Deleted || model.deleted[k] || model.blocks[uid][m.SenderID] {
						continue
					}
					if q.cid != 0 && k[0] != q.cid || q.sender >= 0 && m.SenderID != q.sender {
						continue
					}
					if q.after != nil && !m.CreatedAt.After(*q.after) || q.before != nil && !m.CreatedAt.Before(*q.before) {
						continue
					}
					if text, ok := model.text[k]; ok && q.match(tokensOf(text)) {
						out = append(out, k)
					}
				}
				return out
			}
			sortKeys := func(ks [][2]int64) {
				slices.SortFunc(ks, func(a, b [2]int64) int {
					if a[0] != b[0] {
						return int(a[0] - b[0])
					}
					return int(a[1] - b[1])
				})
			}
			var from, to time.Time
			for _, vis := range visible {
				for _, m := range vis {
					if from.IsZero() || m.CreatedAt.Before(from) {
						from = m.CreatedAt
					}
					if m.CreatedAt.After(to) {
						to = m.CreatedAt
					}
				}
			}
			checked, nonEmpty := 0, 0
			for i := 0; i < tc.queries; i++ {
				q := randomSearchQ(rng, cids, userIDs, from, to)
				who := userIDs
				if !tc.exhaustiveUsers {
					who = []int64{userIDs[rng.IntN(len(userIDs))]}
				}
				for _, uid := range who {
					want := expect(uid, q)
					got, total := users[uid].searchAll(t, q.params, tc.limit)
					require.Len(t, got, len(want), "user %d, %v: no duplicates, nothing missing or extra", uid, q.params)
					sortKeys(want)
					sortKeys(got)
					require.Equal(t, want, got, "user %d, %v", uid, q.params)
					require.Equal(t, int64(len(want)), total, "the total of a quiet corpus is exact")
					checked++
					if len(want) > 0 {
						nonEmpty++
					}
				}
			}
			t.Logf("%d messages in the model, %d checks, %d with results", len(model.text), checked, nonEmpty)
			require.Greater(t, nonEmpty, checked/4, "the queries find something often enough to mean it")
		})
	}
}
