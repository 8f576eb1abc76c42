package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/protocol"
)

// update is PATCH /v1/conversations/{cid}.
func (u *user) update(t testing.TB, cid int64, body any, hdr ...string) resp {
	t.Helper()
	return u.do(t, "PATCH", fmt.Sprintf("/v1/conversations/%d", cid), body, hdr...)
}

// record is the caller's record of cid from GET /v1/conversations.
func (u *user) record(t testing.TB, cid int64, query string) *protocol.Record {
	t.Helper()
	r := u.do(t, "GET", "/v1/conversations?"+query, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var l protocol.ConversationList
	r.decode(t, &l)
	for i := range l.Conversations {
		if l.Conversations[i].ConversationID == cid {
			return &l.Conversations[i]
		}
	}
	return nil
}

// staffed makes a conversation of owner 1 with admin 2, moderator 3 and
// members 4 and 5.
func staffed(t testing.TB, tg *tgw, title string) int64 {
	t.Helper()
	owner := tg.user(t, 1)
	cid := owner.create(t, title, 2, 3, 4, 5)
	require.Equal(t, http.StatusAccepted, owner.setRole(t, cid, 2, "admin").status)
	require.Equal(t, http.StatusAccepted, owner.setRole(t, cid, 3, "moderator").status)
	return cid
}

// TestUpdateConversationAuthorization: who may rename, freeze and set
// the slow mode, answered by the gateway: an owner (1), an admin (2), a
// moderator (3), a member (4) and an outsider (9), with roles enforced
// and without (renaming is then any member's).
func TestUpdateConversationAuthorization(t *testing.T) {
	for _, enforced := range []bool{true, false} {
		tg := newGateway(t, func(c *Config) { c.ConversationRoles = enforced })
		rename := map[int64]string{3: "forbidden", 4: "forbidden", 9: "not_member"}
		if !enforced {
			rename = map[int64]string{9: "not_member"}
		}
		for _, tc := range []struct {
			name string
			body string
			want map[int64]string // the error code per actor ("": allowed)
		}{
			{"rename", `{"title": "new"}`, rename},
			{"freeze", `{"frozen": true}`, map[int64]string{3: "forbidden", 4: "forbidden", 9: "not_member"}},
			{"slow mode", `{"slow_mode": 10}`, map[int64]string{4: "forbidden", 9: "not_member"}},
		} {
			for _, a := range []int64{1, 2, 3, 4, 9} {
				t.Run(fmt.Sprintf("enforced %v/%s by %d", enforced, tc.name, a), func(t *testing.T) {
					cid := staffed(t, tg, "settings")
					r := tg.user(t, a).update(t, cid, tc.body)
					if want := tc.want[a]; want != "" {
						require.Equal(t, http.StatusForbidden, r.status, "%s", r)
						require.Equal(t, want, errCode(t, r))
						return
					}
					require.Equal(t, http.StatusAccepted, r.status, "%s", r)
				})
			}
		}
		tg.verify(t)
	}
}

// TestUpdateConversationRoutes: bad bodies are 400s, an unknown
// conversation a 404; a change shows at once in the records (title,
// frozen, slow_mode and the caller's role), in ?since_version= deltas and
// as a system message; a retry with the same change_id answers as the
// first call; the server API changes any setting.
func TestUpdateConversationRoutes(t *testing.T) {
	tg := newGateway(t, func(c *Config) { serverTestConfig(c); c.ConversationRoles = true })
	cid := staffed(t, tg, "before")
	owner, member := tg.user(t, 1), tg.user(t, 4)
	for _, body := range []string{`{}`, `{"title": ""}`, `{"slow_mode": -1}`, `{"slow_mode": 21601}`, `{"frozen": "yes"}`, `{"color": 1}`} {
		r := owner.update(t, cid, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", body, r)
	}
	require.Equal(t, http.StatusNotFound, owner.update(t, 99999, `{"frozen": true}`).status)

	rec := member.record(t, cid, "")
	require.Equal(t, "before", rec.Title)
	require.False(t, rec.Frozen)
	require.Zero(t, rec.SlowMode)
	require.Equal(t, "member", rec.Role)
	require.Equal(t, "owner", owner.record(t, cid, "").Role)
	since := rec.Version

	change := uuid.NewString()
	r := owner.update(t, cid, map[string]any{"title": "after", "frozen": true, "slow_mode": 30, "change_id": change})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	rec = member.record(t, cid, "since_version="+strconv.FormatInt(since, 10))
	require.NotNil(t, rec, "the change is in the member's delta")
	require.Equal(t, "after", rec.Title)
	require.True(t, rec.Frozen)
	require.Equal(t, 30, rec.SlowMode)
	r = owner.update(t, cid, map[string]any{"title": "other", "change_id": change})
	require.Equal(t, http.StatusAccepted, r.status, "a retry: %s", r)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	require.Equal(t, "after", member.record(t, cid, "").Title, "the retry changed nothing")

	var updates []map[string]any
	for _, m := range messagesOf(member.sync(t, "after=0").Entries) {
		if m.Kind == "system" && msgSystem(t, m)["event"] == "conversation.updated" {
			updates = append(updates, msgSystem(t, m))
		}
	}
	require.Equal(t, []map[string]any{{"event": "conversation.updated", "by": float64(1), "title": "after", "frozen": true,
		"slow_mode": float64(30)}}, updates)

	// Setting what is already set changes nothing and answers 202.
	require.Equal(t, http.StatusAccepted, owner.update(t, cid, `{"frozen": true}`).status)

	svc, _ := tg.service(t, "ops", apikey.ScopeConversations)
	path := fmt.Sprintf("/v1/server/conversations/%d", cid)
	reader, _ := tg.service(t, "reader", apikey.ScopeRead)
	r = reader.do(t, "GET", path, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var state protocol.ServerConversation
	r.decode(t, &state)
	require.Equal(t, protocol.ServerConversation{ConversationID: cid, Title: "after", LastSeq: state.LastSeq, MemberCount: 5,
		Mode: protocol.ModeWrite, Frozen: true, SlowMode: 30}, state)
	for range 2 {
		r = svc.do(t, "PATCH", path, map[string]any{"frozen": false, "slow_mode": 0}, idem("settings-1")...)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	}
	rec = member.record(t, cid, "")
	require.False(t, rec.Frozen)
	require.Zero(t, rec.SlowMode)
	r = svc.do(t, "PATCH", path, map[string]any{"frozen": true})
	require.Equal(t, http.StatusBadRequest, r.status, "no Idempotency-Key: %s", r)
	r = svc.do(t, "PATCH", "/v1/server/conversations/99999", map[string]any{"frozen": true}, idem("settings-2")...)
	require.Equal(t, http.StatusNotFound, r.status, "%s", r)
	tg.verify(t)
}

// TestFrozenRoutes: in a frozen conversation a moderator's and a
// member's send, edit, reaction, delete and add are refused early (403
// forbidden, "frozen"), the admin's and owner's pass; unfrozen, the
// member sends again.
func TestFrozenRoutes(t *testing.T) {
	tg := newGateway(t, nil) // roles not enforced: a member may add, but for the freeze
	cid := staffed(t, tg, "frozen")
	owner, admin := tg.user(t, 1), tg.user(t, 2)
	mine := map[int64]protocol.Message{}
	for _, u := range []int64{3, 4} {
		mine[u] = tg.user(t, u).send(t, cid, "before")
	}
	require.Equal(t, http.StatusAccepted, admin.update(t, cid, `{"frozen": true}`).status)

	key := func() []string { return []string{"Idempotency-Key", uuid.NewString()} }
	for _, a := range []int64{3, 4} {
		u := tg.user(t, a)
		for name, r := range map[string]resp{
			"send": u.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", cid), `{"body": "hush"}`, key()...),
			"edit": u.do(t, "PATCH", fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, mine[a].Seq), `{"body": "edited"}`, key()...),
			"react": u.do(t, "PUT", fmt.Sprintf("/v1/conversations/%d/messages/%d/reaction", cid, mine[a].Seq),
				`{"emoji": "+1"}`, key()...),
			"delete": u.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/messages/%d", cid, mine[a].Seq), nil, key()...),
			"add":    u.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), `{"user_id": 7}`),
		} {
			require.Equal(t, http.StatusForbidden, r.status, "%d %s: %s", a, name, r)
			require.Equal(t, "forbidden", errCode(t, r))
			require.Contains(t, r.String(), fmt.Sprintf("conversation %d is frozen", cid), name)
		}
	}
	owner.send(t, cid, "the owner speaks")
	admin.send(t, cid, "the admin too")
	r := admin.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), `{"user_id": 7}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r)

	require.Equal(t, http.StatusAccepted, owner.update(t, cid, `{"frozen": false}`).status)
	tg.user(t, 4).send(t, cid, "after")
	tg.verify(t)
}

// TestSlowModeRoutes: in slow mode a member's second send within the
// interval is a 429 rate_limited with Retry-After, a retry of its
// accepted send (the same msg_id) is not refused, a moderator is not
// limited, and turning slow mode off lifts it.
func TestSlowModeRoutes(t *testing.T) {
	tg := newGateway(t, nil)
	cid := staffed(t, tg, "slow")
	mod, member := tg.user(t, 3), tg.user(t, 4)
	require.Equal(t, http.StatusAccepted, mod.update(t, cid, `{"slow_mode": 600}`).status)

	path := fmt.Sprintf("/v1/conversations/%d/messages", cid)
	first := uuid.NewString()
	r := member.do(t, "POST", path, map[string]any{"msg_id": first, "body": "one"})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	r = member.do(t, "POST", path, map[string]any{"msg_id": uuid.NewString(), "body": "two"})
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r)
	require.Equal(t, "rate_limited", errCode(t, r))
	after, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
	require.True(t, after > 590 && after <= 600, "Retry-After %d", after)
	r = member.do(t, "POST", path, map[string]any{"msg_id": first, "body": "one"})
	require.Equal(t, http.StatusOK, r.status, "a retry of the accepted send: %s", r)

	// A send admitted whose append failed (or whose answer was lost before
	// its projection): the admission holds its msg_id, and the retry is
	// admitted again without a new turn.
	lost := uuid.NewString()
	_, err = tg.g.srv.Conv(cid).Exec(context.Background(), `UPDATE slow_sends SET msg_id = $3, last_at = now()
WHERE conversation_id = $1 AND user_id = $2`, cid, 4, lost)
	require.NoError(t, err)
	r = member.do(t, "POST", path, map[string]any{"msg_id": lost, "body": "again"})
	require.Equal(t, http.StatusCreated, r.status, "the retry of an admitted send: %s", r)
	r = member.do(t, "POST", path, map[string]any{"msg_id": uuid.NewString(), "body": "three"})
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r)

	for range 3 {
		mod.send(t, cid, "unlimited")
	}
	require.Equal(t, http.StatusAccepted, mod.update(t, cid, `{"slow_mode": 0}`).status)
	member.send(t, cid, "free again")
	tg.verify(t)
}

// TestSlowModeAcrossGateways: one member sends as fast as it can through
// two gateways at once into a conversation in slow mode (1 s) for a few
// seconds. Exactly one send per interval gets through: consecutive
// admitted sends are at least the interval apart by the database's
// clock (a trigger logs each admission), their count is the intervals the
// run spans, every refusal is a 429 with Retry-After, and a moderator
// sending meanwhile is never refused.
func TestSlowModeAcrossGateways(t *testing.T) {
	const slow = 1
	tg := newGateway(t, nil)
	g2, err := NewOn(wsTestConfig(tg.env, nil), placementOf(tg.env), tg.env.Producer)
	require.NoError(t, err)
	startListen(t, g2)
	srv2 := httptest.NewServer(g2.Handler())
	t.Cleanup(func() {
		g2.Drain()
		srv2.Close()
	})
	tg2 := &tgw{env: tg.env, g: g2, srv: srv2, url: srv2.URL, hc: tg.hc}
	cid := staffed(t, tg, "slow across")
	require.Equal(t, http.StatusAccepted, tg.user(t, 3).update(t, cid, map[string]any{"slow_mode": slow}).status)

	ctx := context.Background()
	pool := tg.g.srv.Conv(cid)
	_, err = pool.Exec(ctx, `CREATE TABLE slow_log (user_id bigint, at timestamptz);
CREATE FUNCTION slow_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' OR NEW.last_at <> OLD.last_at THEN
		INSERT INTO slow_log VALUES (NEW.user_id, NEW.last_at);
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER slow_log AFTER INSERT OR UPDATE ON slow_sends FOR EACH ROW EXECUTE FUNCTION slow_log();`)
	require.NoError(t, err)

	member := []*user{tg.user(t, 4), {tg: tg2, id: 4, token: tg.user(t, 4).token}}
	mod := []*user{tg.user(t, 3), {tg: tg2, id: 3, token: tg.user(t, 3).token}}
	path := fmt.Sprintf("/v1/conversations/%d/messages", cid)
	const window = 5 * time.Second
	start := time.Now()
	var wg sync.WaitGroup
	var tried, accepted, refused, badRefusals, modSent, modRefused atomic.Int64
	for i := range 4 {
		wg.Go(func() {
			for j := 0; time.Since(start) < window; j++ {
				r, err := member[(i+j)%2].doE("POST", path, map[string]any{"msg_id": uuid.NewString(), "body": "x"})
				if err != nil {
					continue
				}
				tried.Add(1)
				switch r.status {
				case http.StatusCreated, http.StatusAccepted:
					accepted.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
					if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || s > slow {
						badRefusals.Add(1)
					}
				default:
					badRefusals.Add(1)
				}
			}
		})
	}
	var modWG sync.WaitGroup
	modWG.Go(func() {
		for j := 0; time.Since(start) < window; j++ {
			r, err := mod[j%2].doE("POST", path, map[string]any{"msg_id": uuid.NewString(), "body": "m"})
			if err != nil {
				continue
			}
			if r.status == http.StatusCreated || r.status == http.StatusAccepted {
				modSent.Add(1)
			} else {
				modRefused.Add(1)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	wg.Wait()
	var end float64 // the database's clock at the member's last attempt
	require.NoError(t, pool.QueryRow(ctx, `SELECT extract(epoch FROM clock_timestamp())::float8`).Scan(&end))
	modWG.Wait()

	rows, err := pool.Query(ctx, `SELECT extract(epoch FROM at)::float8 FROM slow_log WHERE user_id = 4 ORDER BY at`)
	require.NoError(t, err)
	var ats []float64
	for rows.Next() {
		var at float64
		require.NoError(t, rows.Scan(&at))
		ats = append(ats, at)
	}
	require.NoError(t, rows.Err())
	minGap, maxGap := float64(window), 0.0
	for i := 1; i < len(ats); i++ {
		gap := ats[i] - ats[i-1]
		require.GreaterOrEqual(t, gap, float64(slow), "admissions %d and %d are %.6f s apart", i-1, i, gap)
		minGap, maxGap = min(minGap, gap), max(maxGap, gap)
	}
	// The intervals the run spans from the first admission to its end:
	// each admits exactly one send, a little after it opens (the time
	// of a request), so the last may close before its send comes.
	spanned := 0
	if len(ats) > 0 {
		spanned = int((end-ats[0])/slow) + 1
	}
	t.Logf("slow mode %d s, two gateways, %v: member tried %d sends, %d accepted, %d refused with 429 (intervals spanned %d, admissions %.3f..%.3f s apart); moderator sent %d, refused %d",
		slow, window, tried.Load(), accepted.Load(), refused.Load(), spanned, minGap, maxGap, modSent.Load(), modRefused.Load())
	require.Equal(t, int64(len(ats)), accepted.Load(), "one logged admission per accepted send")
	require.Zero(t, badRefusals.Load(), "every refusal is a 429 with a Retry-After of 1..%d s", slow)
	require.Positive(t, refused.Load(), "the member outran the slow mode")
	require.Contains(t, []int{spanned - 1, spanned}, len(ats), "one admission per interval the run spans")
	require.Less(t, maxGap, float64(2*slow), "no interval passed without an admission while the member kept trying")
	require.Positive(t, modSent.Load())
	require.Zero(t, modRefused.Load(), "a moderator is not limited")
	tg.verify(t)
}
