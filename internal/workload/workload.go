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
		id := g.cfg.FirstConvID + int64(g.next)
		g.next++
		n := g.cfg.MinMembers + g.rnd.IntN(g.cfg.MaxMembers-g.cfg.MinMembers+1)
		c := &conv{id: id}
		for len(c.members) < n {
			if u := g.user(); !c.has(u) {
				c.members = append(c.members, u)
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
		g.LastSeq[c.id] = c.seq
		return e
	case p < cut+g.cfg.RemovePct:
		if len(c.members) <= 2 {
			break
		}
		i := g.rnd.IntN(len(c.members))
		e := events.New(events.MemberRemoved, c.id, member)
		e.UserID = c.members[i]
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
	e := events.New(events.MessageSent, c.id, member)
	e.MsgID = uuid.NewString()
	e.Body = &g.body
	c.seq++
	g.LastSeq[c.id] = c.seq
	g.Sends++
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
