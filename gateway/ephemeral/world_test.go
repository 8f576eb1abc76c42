package ephemeral

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// world is what the statements of this package read and write, in memory:
// the current members of conversations, the settings, and the presence
// tables (migrations/00007_presence.sql) with the database's clock. Each
// statement runs atomically (under mu); the advisory locks, which order
// the statements of concurrent transactions, are noted and not needed
// then. pg_notify hands the payload to every gateway listening.
type world struct {
	mu         sync.Mutex
	now        time.Time                 // now() of the database
	members    map[int64]map[int64]bool  // conversation -> current members
	readFanout map[int64]bool            // read-mode conversations
	hideP      map[int64]bool            // user_settings.hide_presence
	hideR      map[int64]bool            // user_settings.hide_receipts
	sessions   map[int64]map[string]bool // presence_sessions: user -> gateways
	gateways   map[string]time.Time      // presence_gateways.heartbeat_at
	lastSeen   map[int64]time.Time       // presence_last_seen
	conns      map[int64]map[string]bool // connections: user -> gateways
	listeners  map[string]func(payload string)
	fail       map[string]error // by statement name: the next run fails
	log        []call
	ran        chan call // every statement, when set
}

// call is a statement run: its name and text parameters.
type call struct {
	name string
	args [][]byte
}

func newWorld() *world {
	return &world{now: time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC), members: map[int64]map[int64]bool{},
		readFanout: map[int64]bool{}, hideP: map[int64]bool{}, hideR: map[int64]bool{}, sessions: map[int64]map[string]bool{},
		gateways: map[string]time.Time{}, lastSeen: map[int64]time.Time{}, conns: map[int64]map[string]bool{},
		listeners: map[string]func(string){}, fail: map[string]error{}, ran: make(chan call, 1024)}
}

// do changes the world under its lock.
func (w *world) do(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f()
}

// conversation makes conv with current members.
func (w *world) conversation(conv int64, members ...int64) {
	w.do(func() {
		w.members[conv] = map[int64]bool{}
		for _, u := range members {
			w.members[conv][u] = true
		}
	})
}

// calls is the names of the statements run so far.
func (w *world) calls() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, len(w.log))
	for i, c := range w.log {
		out[i] = c.name
	}
	return out
}

// callsOf is the statements run so far named name.
func (w *world) callsOf(name string) []call {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []call
	for _, c := range w.log {
		if c.name == name {
			out = append(out, c)
		}
	}
	return out
}

// listen makes gw's Handle hear pg_notify on channel.
func (w *world) listen(gw string, s *Service) {
	w.do(func() { w.listeners[gw] = s.Handle })
}

// waitFor waits until cond holds, with w.mu held: looked at after each
// statement and, for what the Service notes after one (a commit's
// effect), every millisecond.
func (w *world) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(wait)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-w.ran:
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waiting for %s", what)
		}
	}
}

// live reports whether a gateway other than but holds user (its heartbeat
// younger than expiry): the liveRow fragment.
func (w *world) live(user int64, but string, expiry time.Duration) bool {
	for gw := range w.sessions[user] {
		if gw != but && w.gateways[gw].After(w.now.Add(-expiry)) {
			return true
		}
	}
	return false
}

// shares reports whether a and b are current members of one write-mode
// conversation.
func (w *world) shares(a, b int64) bool {
	for c, m := range w.members {
		if m[a] && m[b] && !w.readFanout[c] {
			return true
		}
	}
	return false
}

const zeroGateway = "00000000-0000-0000-0000-000000000000"

// statements maps the text of each statement to its name and its effect.
func (w *world) statements(cs *connState) map[string]struct {
	name string
	run  func(a [][]byte) result
} {
	type st = struct {
		name string
		run  func(a [][]byte) result
	}
	secs := func(b []byte) time.Duration { return time.Duration(argFloat(b) * float64(time.Second)) }
	audience := func(conv, n int64, hidden bool) result {
		m, ok := w.members[conv]
		if !ok || hidden {
			return result{cols: []uint32{boolCol, intsCol}}
		}
		small := int64(len(m)) <= n
		users := []int64{}
		if small {
			users = sortedKeys(m)
		}
		return result{cols: []uint32{boolCol, intsCol}, rows: [][]any{{small, users}}}
	}
	among := func(conv int64, local []int64, hidden bool) result {
		r := result{cols: []uint32{intCol}}
		if hidden {
			return r
		}
		for _, u := range local {
			if w.members[conv][u] {
				r.rows = append(r.rows, []any{u})
			}
		}
		return r
	}
	users := func(us []int64) result {
		r := result{cols: []uint32{intCol}}
		for _, u := range us {
			r.rows = append(r.rows, []any{u})
		}
		return r
	}
	notify := func(payload string) {
		if cs.inTx {
			cs.pending = append(cs.pending, payload)
			return
		}
		w.deliverLocked(payload)
	}
	add := func(m map[int64]map[string]bool, u int64, gw string) bool {
		if m[u] == nil {
			m[u] = map[string]bool{}
		}
		had := m[u][gw]
		m[u][gw] = true
		return !had
	}
	del := func(m map[int64]map[string]bool, u int64, gw string) bool {
		had := m[u][gw]
		delete(m[u], gw)
		if len(m[u]) == 0 {
			delete(m, u)
		}
		return had
	}
	return map[string]st{
		sqlTypingNotify: {"typing_notify", func(a [][]byte) result {
			if !w.members[argInt(a[0])][argInt(a[1])] {
				return result{cols: []uint32{boolCol}}
			}
			notify(string(a[3]))
			return result{cols: []uint32{boolCol}, rows: [][]any{{false}}} // a member, not muted
		}},
		typingAudience.byConv: {"typing_by_conv", func(a [][]byte) result {
			return audience(argInt(a[0]), argInt(a[1]), false)
		}},
		typingAudience.byList: {"typing_by_list", func(a [][]byte) result {
			return among(argInt(a[0]), argInts(a[1]), false)
		}},
		receiptAudience.byConv: {"receipt_by_conv", func(a [][]byte) result {
			conv := argInt(a[0])
			return audience(conv, argInt(a[1]), w.readFanout[conv] || w.hideR[argInt(a[2])])
		}},
		receiptAudience.byList: {"receipt_by_list", func(a [][]byte) result {
			conv := argInt(a[0])
			return among(conv, argInts(a[1]), w.readFanout[conv] || w.hideR[argInt(a[2])])
		}},
		sqlConnect: {"connect", func(a [][]byte) result {
			add(w.conns, argInt(a[0]), string(a[1]))
			return result{tag: "INSERT 0 1"}
		}},
		sqlDisconnect: {"disconnect", func(a [][]byte) result {
			del(w.conns, argInt(a[0]), string(a[1]))
			return result{tag: "DELETE 1"}
		}},
		sqlLockUser:  {"lock_user", func([][]byte) result { return result{cols: []uint32{textCol}, rows: [][]any{{""}}} }},
		sqlLockUsers: {"lock_users", func([][]byte) result { return result{cols: []uint32{textCol}} }},
		sqlUp: {"up", func(a [][]byte) result {
			u, gw := argInt(a[0]), string(a[1])
			inserted := add(w.sessions, u, gw)
			return result{cols: []uint32{boolCol}, rows: [][]any{{inserted && !w.live(u, gw, secs(a[2])) && !w.hideP[u]}}}
		}},
		sqlDown: {"down", func(a [][]byte) result {
			u, gw := argInt(a[0]), string(a[1])
			offline := del(w.sessions, u, gw) && !w.live(u, gw, secs(a[2]))
			if offline {
				w.lastSeen[u] = argTime(a[3]).Time.UTC()
			}
			return result{cols: []uint32{boolCol}, rows: [][]any{{offline && !w.hideP[u]}}}
		}},
		sqlNotify: {"notify", func(a [][]byte) result {
			notify(string(a[1]))
			return result{cols: []uint32{textCol}, rows: [][]any{{""}}}
		}},
		sqlPartners: {"partners", func(a [][]byte) result {
			u := argInt(a[0])
			var out []int64
			for _, c := range sortedKeys(w.members) {
				if !w.members[c][u] || w.readFanout[c] {
					continue
				}
				for _, v := range sortedKeys(w.members[c]) {
					if v != u && !slices.Contains(out, v) {
						out = append(out, v)
					}
				}
			}
			return users(out)
		}},
		sqlBeat: {"beat", func(a [][]byte) result {
			gw := string(a[0])
			_, had := w.gateways[gw]
			w.gateways[gw] = w.now
			return result{cols: []uint32{boolCol}, rows: [][]any{{!had}}}
		}},
		sqlDeadGateways: {"dead_gateways", func(a [][]byte) result {
			r := result{cols: []uint32{textCol}}
			for _, gw := range sortedKeys(w.gateways) {
				if w.gateways[gw].Before(w.now.Add(-secs(a[0]))) {
					r.rows = append(r.rows, []any{gw})
				}
			}
			return r
		}},
		sqlReapGateway: {"reap_gateway", func(a [][]byte) result {
			gw := string(a[0])
			at, ok := w.gateways[gw]
			r := result{cols: []uint32{timeCol}}
			if ok && at.Before(w.now.Add(-secs(a[1]))) {
				delete(w.gateways, gw)
				r.rows = [][]any{{at}}
			}
			return r
		}},
		sqlDeadRows: {"dead_rows", func(a [][]byte) result {
			gw := string(a[0])
			for u := range w.conns {
				del(w.conns, u, gw)
			}
			var gone []int64
			for _, u := range sortedKeys(w.sessions) {
				if del(w.sessions, u, gw) {
					gone = append(gone, u)
				}
			}
			return users(gone)
		}},
		sqlGone: {"gone", func(a [][]byte) result {
			last := argTime(a[2]).Time.UTC()
			var out []int64
			for _, u := range argInts(a[0]) {
				if w.live(u, zeroGateway, secs(a[1])) {
					continue
				}
				if last.After(w.lastSeen[u]) {
					w.lastSeen[u] = last
				}
				if !w.hideP[u] {
					out = append(out, u)
				}
			}
			return users(out)
		}},
		sqlRetire: {"retire", func(a [][]byte) result {
			if _, ok := w.gateways[string(a[0])]; ok {
				w.gateways[string(a[0])] = w.now.Add(-secs(a[1]))
			}
			return result{tag: "UPDATE 1"}
		}},
		`DELETE FROM connections WHERE gateway_id = $1`: {"delete_connections", func(a [][]byte) result {
			for u := range w.conns {
				del(w.conns, u, string(a[0]))
			}
			return result{tag: "DELETE 0"}
		}},
		sqlLookup: {"lookup", func(a [][]byte) result {
			asker, expiry := argInt(a[0]), secs(a[2])
			r := result{cols: []uint32{intCol, boolCol, timeCol, boolCol}}
			us := argInts(a[1])
			slices.Sort(us)
			for _, u := range slices.Compact(us) {
				if u != asker && !w.shares(asker, u) {
					continue
				}
				var seen any
				if t, ok := w.lastSeen[u]; ok {
					seen = t
				}
				r.rows = append(r.rows, []any{u, w.live(u, zeroGateway, expiry), seen, w.hideP[u]})
			}
			return r
		}},
		sqlState: {"state", func(a [][]byte) result {
			u := argInt(a[0])
			var seen any
			if t, ok := w.lastSeen[u]; ok {
				seen = t
			}
			return result{cols: []uint32{boolCol, timeCol}, rows: [][]any{{w.live(u, zeroGateway, secs(a[1])), seen}}}
		}},
	}
}

// deliverLocked hands a notification to every gateway, as each one's
// LISTEN connection does: in order (Handle never blocks).
func (w *world) deliverLocked(payload string) {
	for _, gw := range sortedKeys(w.listeners) {
		w.listeners[gw](payload)
	}
}

// note logs a transaction's begin, commit or rollback on cs: a commit
// delivers its notifications, a rollback drops them.
func (w *world) note(name string, cs *connState) {
	w.mu.Lock()
	c := call{name: name}
	w.log = append(w.log, c)
	switch name {
	case "begin":
		cs.inTx = true
	case "commit":
		for _, p := range cs.pending {
			w.deliverLocked(p)
		}
		fallthrough
	default:
		cs.inTx, cs.pending = false, nil
	}
	w.mu.Unlock()
	select {
	case w.ran <- c:
	default:
	}
}

// callsOfLocked is callsOf with w.mu held.
func (w *world) callsOfLocked(name string) []call {
	var out []call
	for _, c := range w.log {
		if c.name == name {
			out = append(out, c)
		}
	}
	return out
}

// run answers one statement.
func (w *world) run(t *testing.T, sql string, args [][]byte, cs *connState) *result {
	st, ok := w.statements(cs)[sql]
	if !ok {
		t.Errorf("fakePG: statement not faked: %s", sql)
		return &result{err: errors.New("not faked")}
	}
	w.mu.Lock()
	c := call{name: st.name, args: args}
	w.log = append(w.log, c)
	var r result
	if err := w.fail[st.name]; err != nil {
		delete(w.fail, st.name)
		r.err = err
	} else {
		r = st.run(args)
	}
	w.mu.Unlock()
	select {
	case w.ran <- c:
	default:
	}
	return &r
}

func sortedKeys[K int64 | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
