// Package workload generates randomized, valid-by-construction event streams
// (with a controlled share of invalid sends) and the outcome they must
// project to, for the invariant tests and the benchmarks.
package workload

import (
	"math/rand/v2"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/events"
)

// Config shapes a workload. Zero fields take the defaults in brackets.
type Config struct {
	Seed          uint64
	Users         int   // [1000] user ids 1..Users
	Conversations int   // [200]
	FirstConvID   int64 // [1]
	MinMembers    int   // [3] members at creation, creator included
	MaxMembers    int   // [10]
	// Shares of the operations after creation, in percent; the rest are
	// messages from members. Defaults: 4 adds, 3 removes, 3 pins, 3 reads,
	// 1 non-member send.
	AddPct, RemovePct, PinPct, ReadPct, StrangerPct int
	// NoChurn turns every operation into a message (for throughput runs).
	NoChurn bool
	// BodyBytes of each message [16].
	BodyBytes int
	// Changes of messages, in percent of the operations (0 by default):
	// edits and deletes of the member's own messages, reactions added and
	// removed on messages the member can see, and sends that reply to one.
	// All of them are valid: none is rejected.
	EditPct, DeletePct, ReactPct, UnreactPct, ReplyPct int
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Users, 1000)
	def(&c.Conversations, 200)
	def(&c.MinMembers, 3)
	def(&c.MaxMembers, 10)
	def(&c.BodyBytes, 16)
	if c.FirstConvID == 0 {
		c.FirstConvID = 1
	}
	if !c.NoChurn {
		def(&c.AddPct, 4)
		def(&c.RemovePct, 3)
		def(&c.PinPct, 3)
		def(&c.ReadPct, 3)
		def(&c.StrangerPct, 1)
	}
}

type conv struct {
	id      int64
	members []int64
	seq     int64
	joined  map[int64]int64 // member -> the seq its span began
	texts   []text          // its text messages
}

// text is a text message of the model: who sent it, whether it is deleted,
// and who reacted with what.
type text struct {
	seq, sender int64
	deleted     bool
	edited      bool
	reactions   map[int64]string
}

// Generator produces events; Expect says what they project to.
type Generator struct {
	cfg   Config
	rnd   *rand.Rand
	convs []*conv
	next  int // conversations created so far
	body  string
	// Expectations.
	Rejected int // events that must be rejected (non-member sends)
	Sends    int // accepted message.sent events
	Changes  int // message changes (all applied)
	Events   int // events generated
	LastSeq  map[int64]int64
}

// New returns a generator.
func New(cfg Config) *Generator {
	cfg.setDefaults()
	g := &Generator{cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), LastSeq: map[int64]int64{}}
	b := make([]byte, cfg.BodyBytes)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	g.body = string(b)
	return g
}

func (g *Generator) user() int64 { return 1 + g.rnd.Int64N(int64(g.cfg.Users)) }

func (c *conv) has(u int64) bool {
	for _, m := range c.members {
		if m == u {
			return true
		}
	}
	return false
}

// Next returns the next event. The first Conversations events create the
// conversations.
func (g *Generator) Next() *events.Event {
	g.Events++
	if g.next < g.cfg.Conversations {
		return g.create()
	}
	c := g.convs[g.rnd.IntN(len(g.convs))]
	member := c.members[g.rnd.IntN(len(c.members))]
	p := g.rnd.IntN(100)
	cut := g.cfg.AddPct
	switch {
	case p < cut:
		u := g.user()
		if c.has(u) {
			break
		}
		e := events.New(events.MemberAdded, c.id, member)
		e.UserID = u
		c.members = append(c.members, u)
		c.seq++
		c.joined[u] = c.seq
		g.LastSeq[c.id] = c.seq
		return e
	case p < cut+g.cfg.RemovePct:
		if len(c.members) <= 2 {
			break
		}
		i := g.rnd.IntN(len(c.members))
		e := events.New(events.MemberRemoved, c.id, member)
		e.UserID = c.members[i]
		delete(c.joined, e.UserID)
		c.members = append(c.members[:i], c.members[i+1:]...)
		c.seq++
		g.LastSeq[c.id] = c.seq
		return e
	case p < cut+g.cfg.RemovePct+g.cfg.PinPct:
		e := events.New(events.RecordUpdated, c.id, member)
		e.Pinned = events.Ptr(g.rnd.IntN(2) == 0)
		if g.rnd.IntN(2) == 0 {
			e.Muted = events.Ptr(g.rnd.IntN(2) == 0)
		}
		return e
	case p < cut+g.cfg.RemovePct+g.cfg.PinPct+g.cfg.ReadPct:
		e := events.New(events.ReadUpdated, c.id, member)
		e.ReadSeq = events.Ptr(g.rnd.Int64N(c.seq + 1))
		return e
	case p < cut+g.cfg.RemovePct+g.cfg.PinPct+g.cfg.ReadPct+g.cfg.StrangerPct:
		u := g.user()
		if c.has(u) {
			break
		}
		e := events.New(events.MessageSent, c.id, u)
		e.MsgID = uuid.NewString()
		e.Body = &g.body
		g.Rejected++
		return e
	}
	if e := g.change(c, member, p-(cut+g.cfg.RemovePct+g.cfg.PinPct+g.cfg.ReadPct+g.cfg.StrangerPct)); e != nil {
		g.Changes++
		return e
	}
	e := events.New(events.MessageSent, c.id, member)
	e.MsgID = uuid.NewString()
	e.Body = &g.body
	if g.rnd.IntN(100) < g.cfg.ReplyPct {
		if t := g.visible(c, member); t != nil {
			e.ReplyTo = t.seq
		}
	}
	c.seq++
	c.texts = append(c.texts, text{seq: c.seq, sender: member})
	g.LastSeq[c.id] = c.seq
	g.Sends++
	return e
}

// emoji are the reactions of the workloads.
var emoji = []string{"👍", "🎉", "❤️", "😂", "👀"}

// change returns a change of a message by member when p falls in the
// changes' shares and one applies, else nil (a plain send then).
func (g *Generator) change(c *conv, member int64, p int) *events.Event {
	var typ string
	switch cut := 0; {
	case p < 0:
		return nil // an earlier operation that did not apply: a send
	case p < cut+g.cfg.EditPct:
		typ = events.MessageEdited
	case p < cut+g.cfg.EditPct+g.cfg.DeletePct:
		typ = events.MessageDeleted
	case p < cut+g.cfg.EditPct+g.cfg.DeletePct+g.cfg.ReactPct:
		typ = events.ReactionAdded
	case p < cut+g.cfg.EditPct+g.cfg.DeletePct+g.cfg.ReactPct+g.cfg.UnreactPct:
		typ = events.ReactionRemoved
	default:
		return nil
	}
	var t *text
	if typ == events.MessageEdited || typ == events.MessageDeleted {
		t = g.own(c, member)
	} else {
		t = g.visible(c, member)
	}
	if t == nil {
		return nil
	}
	e := events.New(typ, c.id, member)
	e.ChangeID, e.Seq = uuid.NewString(), t.seq
	switch typ {
	case events.MessageEdited:
		body := g.body + " (edited)"
		e.Body = &body
		t.edited = true
	case events.MessageDeleted:
		t.deleted, t.reactions = true, nil
	case events.ReactionAdded:
		e.Emoji = emoji[g.rnd.IntN(len(emoji))]
		if t.reactions == nil {
			t.reactions = map[int64]string{}
		}
		t.reactions[member] = e.Emoji
	case events.ReactionRemoved:
		delete(t.reactions, member)
	}
	return e
}

// own returns a random undeleted text message member sent (and can still
// see), or nil.
func (g *Generator) own(c *conv, member int64) *text {
	var mine []*text
	for i := range c.texts {
		t := &c.texts[i]
		if t.sender == member && !t.deleted && t.seq >= c.joined[member] {
			mine = append(mine, t)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	return mine[g.rnd.IntN(len(mine))]
}

// visible returns a random undeleted text message member can see, or nil.
func (g *Generator) visible(c *conv, member int64) *text {
	lo := c.joined[member]
	var seen []*text
	for i := range c.texts {
		if t := &c.texts[i]; t.seq >= lo && !t.deleted {
			seen = append(seen, t)
		}
	}
	if len(seen) == 0 {
		return nil
	}
	return seen[g.rnd.IntN(len(seen))]
}

// create returns the creation of the next conversation.
func (g *Generator) create() *events.Event {
	id := g.cfg.FirstConvID + int64(g.next)
	g.next++
	n := g.cfg.MinMembers + g.rnd.IntN(g.cfg.MaxMembers-g.cfg.MinMembers+1)
	c := &conv{id: id, joined: map[int64]int64{}}
	for len(c.members) < n {
		if u := g.user(); !c.has(u) {
			c.members = append(c.members, u)
			c.joined[u] = 1
		}
	}
	g.convs = append(g.convs, c)
	e := events.New(events.ConversationCreated, id, c.members[0])
	e.Title = "conversation"
	e.Members = append([]int64(nil), c.members[1:]...)
	c.seq = 1
	g.LastSeq[id] = 1
	return e
}

// Members returns the current members of a conversation (by the model).
func (g *Generator) Members(convID int64) []int64 {
	for _, c := range g.convs {
		if c.id == convID {
			return append([]int64(nil), c.members...)
		}
	}
	return nil
}

// MessageState is the model's final state of a text message.
type MessageState struct {
	Deleted, Edited bool
	Reactions       map[int64]string // user -> emoji; nil when none
}

// Messages returns the final state of every text message of the model by
// (conversation, seq).
func (g *Generator) Messages() map[[2]int64]MessageState {
	out := map[[2]int64]MessageState{}
	for _, c := range g.convs {
		for _, t := range c.texts {
			st := MessageState{Deleted: t.deleted, Edited: t.edited && !t.deleted}
			if len(t.reactions) > 0 {
				st.Reactions = t.reactions
			}
			out[[2]int64{c.id, t.seq}] = st
		}
	}
	return out
}

// IsChange says whether e is a change of a message.
func IsChange(e *events.Event) bool {
	switch e.Type {
	case events.MessageEdited, events.MessageDeleted, events.ReactionAdded, events.ReactionRemoved:
		return true
	}
	return false
}
