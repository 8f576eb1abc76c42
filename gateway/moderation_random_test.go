package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// A randomized run of moderation through the public API while members
// send: a driver sets roles, bans and unbans, mutes and unmutes, adds and
// removes members as random actors (allowed or not), and senders send as
// random users (banned, muted and outsiders too) at the same time, so that
// the gateway's early answers race the projection's judgement. At the end
// the log is replayed through a model of the rules, written here from
// docs/protocol.md: every event in the log is applied, changes nothing, or
// is refused with the rule the model names; and every projected message
// reached exactly the members the model says it had at its position, so
// that no banned, muted or outsider's send is in any inbox. Three users
// block others for the whole run, and every user types and reads on a
// session of its own: a blocker's sync and WebSocket carry nothing of the
// user it blocks but entries marked and emptied, and none of its typing,
// presence or receipts.
func TestModerationRandomized(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 38))
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	opts := ephemeralOpts()
	tweak := opts.tweak
	opts.tweak = func(c *Config) {
		tweak(c)
		c.TooLongLag = 1 << 20 // every entry is read back by sync: no too-long answer
	}
	w := newWSGatewayOn(t, env, opts)
	tg := w.tgw
	const nUsers = 9 // users 1..9; 1 creates, 8 and 9 start outside
	users := map[int64]*user{}
	for id := int64(1); id <= nUsers; id++ {
		users[id] = tg.user(t, id)
	}
	// Blocks, fixed for the run: who blocks whom. The blockers' sessions
	// must get nothing of the blocked but marked, emptied entries.
	blocked := map[int64]int64{5: 6, 2: 7, 3: 8}
	for blocker, x := range blocked {
		r := users[blocker].do(t, "PUT", fmt.Sprintf("/v1/blocks/%d", x), nil)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r)
	}
	// A lobby nobody moderates keeps every user a partner of every other
	// whatever the run does to cid, so that presence flows.
	users[1].create(t, "lobby", 2, 3, 4, 5, 6, 7, 8, 9)
	// Every user holds a session from the start (presence), writes its
	// typing on it, and records what it receives.
	sessions := map[int64]*wsStream{}
	writeMu := map[int64]*sync.Mutex{}
	for id := int64(1); id <= nUsers; id++ {
		sessions[id] = connect(t, w, users[id])
		writeMu[id] = &sync.Mutex{}
	}
	r := users[1].do(t, "POST", "/v1/conversations", map[string]any{"title": "moderated", "members": []int64{2, 3, 4, 5, 6, 7}, "roles": true})
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	var created protocol.ConversationCreated
	r.decode(t, &created)
	cid := created.ConversationID
	for u, role := range map[int64]string{2: events.RoleAdmin, 3: events.RoleModerator, 4: events.RoleModerator} {
		require.Equal(t, http.StatusAccepted, users[1].setRole(t, cid, u, role).status)
	}

	// Senders: each sends as random users until the driver is done;
	// every answer must be one the protocol documents for a send.
	var mu sync.Mutex
	answers := map[string]int{}
	note := func(what string, r resp) {
		mu.Lock()
		defer mu.Unlock()
		answers[fmt.Sprintf("%s %d", what, r.status)]++
	}
	done := make(chan struct{})
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for s := 0; s < 3; s++ {
		srng := rand.New(rand.NewPCG(seed, uint64(100+s)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 400; i++ {
				select {
				case <-done:
					if i >= 100 { // enough for every check, however fast the driver
						return
					}
				default:
				}
				u := users[1+srng.Int64N(nUsers)]
				r, err := u.doE("POST", fmt.Sprintf("/v1/conversations/%d/messages", cid),
					map[string]any{"msg_id": uuid.NewString(), "body": fmt.Sprintf("from %d", u.id)})
				if err == nil && r.status != http.StatusCreated && r.status != http.StatusAccepted && r.status != http.StatusForbidden &&
					r.status != http.StatusTooManyRequests {
					err = fmt.Errorf("send by %d: %s", u.id, r)
				}
				if err != nil {
					errs <- err
					return
				}
				note("send", r)
				writeMu[u.id].Lock()
				err = sessions[u.id].c.writeJSONE(protocol.Typing{Type: protocol.FrameTyping, ConversationID: cid})
				writeMu[u.id].Unlock()
				if err == nil && r.status == http.StatusCreated && srng.IntN(4) == 0 {
					var m protocol.Message
					// Another user reads it: a move of its read position,
					// which a receipt frame tells the others.
					reader := users[1+srng.Int64N(nUsers)]
					if err = json.Unmarshal(r.body, &m); err == nil && reader != u {
						r, err = reader.doE("POST", fmt.Sprintf("/v1/conversations/%d/read", cid), map[string]any{"seq": m.Seq})
						if err == nil && r.status != http.StatusAccepted && r.status != http.StatusForbidden {
							err = fmt.Errorf("read by %d: %s", reader.id, r)
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Duration(10+srng.IntN(30)) * time.Millisecond)
			}
		}()
	}

	// The driver: moderation as random actors, allowed or not.
	roles := []string{events.RoleAdmin, events.RoleModerator, events.RoleMember}
	for step := 0; step < 150; step++ {
		actor := users[1+rng.Int64N(nUsers)]
		if rng.IntN(3) > 0 { // mostly those who may: the roles set above
			actor = users[1+rng.Int64N(4)]
		}
		target := 1 + rng.Int64N(nUsers)
		var r resp
		var what string
		time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond) // let the senders send meanwhile
		switch op := rng.IntN(100); {
		case op < 20:
			what = "role"
			r = actor.do(t, "PUT", fmt.Sprintf("/v1/conversations/%d/members/%d/role", cid, target), protocol.SetRole{Role: roles[rng.IntN(len(roles))]})
		case op < 30:
			what = "ban"
			r = actor.sanction(t, "PUT", "bans", cid, target, `{}`)
		case op < 45:
			what = "unban"
			r = actor.sanction(t, "DELETE", "bans", cid, target, nil)
		case op < 58:
			what = "mute"
			r = actor.sanction(t, "PUT", "mutes", cid, target, `{}`)
		case op < 70:
			what = "unmute"
			r = actor.sanction(t, "DELETE", "mutes", cid, target, nil)
		case op < 76:
			what = "freeze"
			r = actor.do(t, "PATCH", fmt.Sprintf("/v1/conversations/%d", cid), map[string]any{"frozen": rng.IntN(3) == 0})
		case op < 80:
			what = "slow"
			r = actor.do(t, "PATCH", fmt.Sprintf("/v1/conversations/%d", cid), map[string]any{"slow_mode": rng.IntN(3)})
		case op < 93:
			what = "add"
			r = actor.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/members", cid), map[string]any{"user_id": target})
		default:
			what = "remove"
			r = actor.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/%d", cid, target), nil)
		}
		switch r.status {
		case http.StatusAccepted, http.StatusForbidden, http.StatusNotFound:
		default:
			t.Fatalf("%s of %d by %d: %s", what, target, actor.id, r)
		}
		note(what, r)
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	tg.env.WaitCaughtUp(t, time.Minute)
	t.Logf("answers: %v", answers)

	// The model, over the conversation's events in log order.
	log := conversationLog(t, tg.env, cid)
	m := newModConv()
	outcomes := map[string]int{}
	delivered := map[string][]int64{} // msg_id of each message the model applies -> its members then
	db := tg.g.srv.Conv(cid)
	ctx := context.Background()
	for _, e := range log {
		if e.Type == events.ReadUpdated {
			continue // read positions: not judged by moderation
		}
		want, reasons := m.apply(e)
		id := e.EventID
		if e.Type == events.MessageSent {
			id = e.MsgID
		}
		var projected bool
		require.NoError(t, db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM messages WHERE conversation_id = $1 AND msg_id = $2)`, cid, id).Scan(&projected))
		var reason string
		err := db.QueryRow(ctx, `SELECT reason FROM rejections WHERE event_id = $1`, e.EventID).Scan(&reason)
		if err != nil {
			reason = ""
		}
		switch want {
		case modApplied:
			require.True(t, projected, "%s by %d of %d: the model applies it; refused %q", e.Type, e.ActorID, e.UserID, reason)
			if e.Type == events.MessageSent {
				delivered[e.MsgID] = m.memberList()
			}
		case modNothing:
			require.False(t, projected, "%s by %d of %d changes nothing in the model", e.Type, e.ActorID, e.UserID)
			require.Empty(t, reason, "%s by %d of %d changes nothing in the model", e.Type, e.ActorID, e.UserID)
		case modRefused:
			require.False(t, projected, "%s by %d of %d: the model refuses it (%v)", e.Type, e.ActorID, e.UserID, reasons)
			require.Contains(t, reasons, reason, "%s by %d of %d: refused for a rule the model names", e.Type, e.ActorID, e.UserID)
		}
		outcomes[fmt.Sprintf("%s %s %s", e.Type, want, reason)]++
	}
	t.Logf("log: %d events of the conversation; outcomes %v", len(log), outcomes)
	require.Empty(t, m.tooFast, "slow mode let a member send too soon")
	require.NotZero(t, outcomes[events.MessageSent+" refused "+projection.ReasonMuted]+answers["send 403"],
		"muted sends were refused (early or by the projection)")

	// Every member's inbox holds exactly the messages the model delivered
	// to it: no banned, muted or outsider's send reached anyone.
	got := map[string][]int64{}
	for id, u := range users {
		entries, _, _ := u.syncAll(t, 0, 200)
		for _, en := range entries {
			if en.ConversationID != cid || en.Message == nil || en.Message.Kind != "text" {
				continue
			}
			got[en.Message.MsgID] = append(got[en.Message.MsgID], id)
		}
	}
	for msg := range got {
		sort.Slice(got[msg], func(i, j int) bool { return got[msg][i] < got[msg][j] })
	}
	require.Equal(t, delivered, got, "each projected message reached exactly its members at its position")
	require.NotEmpty(t, delivered)

	// Blocks: nothing of a blocked user reached its blocker, neither over
	// sync nor over the WebSocket, but entries marked and emptied; the
	// others' typing, presence and receipts did (the checks can fail).
	seen := map[string]int{}
	for blocker, x := range blocked {
		entries, _, _ := users[blocker].syncAll(t, 0, 200)
		sessions[blocker].waitCursor(t, entries[len(entries)-1].InboxSeq)
		_, pushed := sessions[blocker].state()
		for how, es := range map[string][]protocol.Entry{"sync": entries, "push": pushed} {
			for _, en := range es {
				if m := en.Message; m != nil && m.SenderID == x && m.Kind == "text" {
					require.True(t, m.SenderBlocked, "%s of %d: a message of %d it blocks, unmarked", how, blocker, x)
					require.Contains(t, []string{"", `""`, "null"}, string(m.Body), "%s of %d: the body of %d it blocks", how, blocker, x)
					seen["marked "+how]++
				}
			}
		}
		s := sessions[blocker]
		s.mu.Lock()
		frames := append(append([]protocol.ServerFrame(nil), s.ephemeral...), s.others...)
		s.mu.Unlock()
		for _, f := range frames {
			switch f.Type {
			case protocol.FrameTyping, protocol.FramePresence, protocol.FrameReceipt:
				require.NotEqual(t, x, f.UserID, "%s frame of %d to %d, who blocks it", f.Type, x, blocker)
				if f.UserID != blocker {
					seen[f.Type]++
				}
			}
		}
	}
	t.Logf("blockers received: %v", seen)
	for _, what := range []string{"marked sync", "marked push", protocol.FrameTyping, protocol.FramePresence, protocol.FrameReceipt} {
		require.NotZero(t, seen[what], "the blockers received no %s at all: the check above checked nothing", what)
	}
	tg.verify(t)
}

// conversationLog reads the whole log and returns the events of
// conversation cid in log order (one partition holds them).
func conversationLog(t *testing.T, env *testenv.Env, cid int64) []*events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(env.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, env.Topic)
	require.NoError(t, err)
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var out []*events.Event
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "the log's end not reached: %v", left)
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
			if e, err := events.Decode(r.Value, 0); err == nil && e.ConversationID == cid {
				out = append(out, e)
			}
		})
	}
	return out
}

// The outcomes of an event in the model.
const (
	modApplied = "applied"
	modNothing = "nothing" // a duplicate of the state: changes nothing
	modRefused = "refused"
)

// modConv is the model of one conversation with roles enforced, written
// from docs/protocol.md ("Roles", "Ban and mute"), for the event types
// the randomized test makes (untimed bans and mutes).
type modConv struct {
	exists bool
	roles  map[int64]string // current members
	banned map[int64]bool
	muted  map[int64]bool
	frozen bool
	// slowMode, and since when it has had that value (the event's at);
	// lastSend is each user's last projected send.
	slowMode  int
	slowSince time.Time
	lastSend  map[int64]time.Time // each user's last send admitted under slow mode
	// tooFast are the sends admitted well within the slow mode of the
	// same user's previous one; roleSince is when each user's role last
	// changed.
	tooFast   []string
	roleSince map[int64]time.Time
}

func newModConv() *modConv {
	return &modConv{roles: map[int64]string{}, banned: map[int64]bool{}, muted: map[int64]bool{}, lastSend: map[int64]time.Time{}, roleSince: map[int64]time.Time{}}
}

func (m *modConv) memberList() []int64 {
	var out []int64
	for u := range m.roles {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// rank is the documented order of roles; a non-member ranks as a member.
func (m *modConv) rank(u int64) int {
	return map[string]int{events.RoleOwner: 3, events.RoleAdmin: 2, events.RoleModerator: 1}[m.roles[u]]
}

// apply judges e and applies it; refused events name every rule they
// break (the projection names one of them).
func (m *modConv) apply(e *events.Event) (string, []string) {
	refused := func(reasons ...string) (string, []string) { return modRefused, reasons }
	if e.Type == events.ConversationCreated {
		m.exists = true
		for _, u := range e.Members {
			m.roles[u] = events.RoleMember
		}
		m.roles[e.ActorID] = events.RoleOwner
		return modApplied, nil
	}
	actor, target := e.ActorID, e.UserID
	if _, member := m.roles[actor]; !member {
		return refused(projection.ReasonNotMember)
	}
	_, targetMember := m.roles[target]
	switch e.Type {
	case events.MessageSent:
		var reasons []string
		if m.muted[actor] {
			reasons = append(reasons, projection.ReasonMuted)
		}
		if m.frozen && m.rank(actor) < 2 {
			reasons = append(reasons, projection.ReasonFrozen)
		}
		if reasons != nil {
			return refused(reasons...)
		}
		if m.slowMode > 0 && m.rank(actor) < 1 {
			// The gateway admits by its reading of the projection (roles,
			// the slow mode itself, which it sees a moment after the
			// log has it) and the database's clock; the model judges by
			// the log and the events' times. So it checks only a pair
			// away from changes of the slow mode and of the user's role
			// (2 s), for sends closer than half the interval.
			if last, ok := m.lastSend[actor]; ok && last.After(m.slowSince.Add(2*time.Second)) && m.roleSince[actor].Before(last.Add(-2*time.Second)) &&
				e.At.Sub(last) < time.Duration(m.slowMode)*time.Second/2 {
				m.tooFast = append(m.tooFast, fmt.Sprintf("user %d sent %v after its previous send, slow mode %d s", actor, e.At.Sub(last), m.slowMode))
			}
			m.lastSend[actor] = e.At
		}
		return modApplied, nil
	case events.ConversationUpdated:
		need := 0 // rename: an admin where roles are enforced (they are here)
		switch {
		case e.Frozen != nil || e.Title != "":
			need = 2
		case e.SlowMode != nil:
			need = 1
		}
		if m.rank(actor) < need {
			return refused(projection.ReasonRole)
		}
		changed := false
		if e.Frozen != nil && *e.Frozen != m.frozen {
			m.frozen, changed = *e.Frozen, true
		}
		if e.SlowMode != nil && *e.SlowMode != m.slowMode {
			m.slowMode, m.slowSince, changed = *e.SlowMode, e.At, true
		}
		if !changed {
			return modNothing, nil
		}
		return modApplied, nil
	case events.MemberAdded:
		switch {
		case targetMember:
			return modNothing, nil
		case m.rank(actor) < 2:
			return refused(projection.ReasonRole, projection.ReasonFrozen)
		case m.banned[target]:
			return refused(projection.ReasonBanned)
		}
		m.roles[target] = events.RoleMember
		return modApplied, nil
	case events.MemberRemoved:
		switch {
		case !targetMember:
			return modNothing, nil
		case actor != target && (m.rank(actor) < 2 || m.rank(actor) <= m.rank(target)):
			return refused(projection.ReasonRole)
		}
		delete(m.roles, target)
		return modApplied, nil
	case events.MemberRoleSet:
		if !targetMember {
			return refused(projection.ReasonNoMember)
		}
		cur := m.roles[target]
		allowed := m.roles[actor] == events.RoleOwner ||
			m.roles[actor] == events.RoleAdmin && m.rank(target) < 2 && e.Role != events.RoleOwner && e.Role != events.RoleAdmin
		if actor == target || !allowed {
			return refused(projection.ReasonRole)
		}
		if cur == e.Role {
			return modNothing, nil
		}
		if e.Role == events.RoleOwner {
			for u, r := range m.roles {
				if r == events.RoleOwner {
					m.roles[u] = events.RoleAdmin
				}
			}
		}
		m.roles[target] = e.Role
		for u := range m.roles {
			m.roleSince[u] = e.At // a transfer demotes another too
		}
		return modApplied, nil
	case events.MemberBanned, events.MemberUnbanned, events.MemberMuted, events.MemberUnmuted:
		if actor == target || m.rank(actor) < 1 || m.rank(actor) <= m.rank(target) {
			return refused(projection.ReasonRole)
		}
		switch e.Type {
		case events.MemberBanned:
			if m.banned[target] && !targetMember {
				return modNothing, nil
			}
			m.banned[target] = true
			delete(m.roles, target)
		case events.MemberUnbanned:
			if !m.banned[target] {
				return modNothing, nil
			}
			delete(m.banned, target)
		case events.MemberMuted:
			if !targetMember {
				return refused(projection.ReasonNoMember)
			}
			if m.muted[target] {
				return modNothing, nil
			}
			m.muted[target] = true
		case events.MemberUnmuted:
			if !m.muted[target] {
				return modNothing, nil
			}
			delete(m.muted, target)
		}
		return modApplied, nil
	}
	panic(fmt.Sprintf("the model knows no %s", e.Type))
}
