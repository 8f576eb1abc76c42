package projector

import (
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/projection"
)

// Read fan-out (docs/large-conversations.md): a conversation above the
// member threshold (or created as a channel) stores each message once and
// writes inbox entries only for the members it mentions and the members
// armed for it (they read to its end since their last entry from it). The
// mode switches at membership messages: up after the join that takes the
// count past the threshold, down at the removal that takes it to half the
// threshold or below (never for a channel); each of those two messages is
// written to every member. Every rule is a function of
// the log alone, never of how it is cut into batches, so that a replay
// projects the same modes.

// DefaultLargeThreshold is the member count above which a conversation
// switches to read fan-out.
const DefaultLargeThreshold = 1000

// modeRow is a switch of a conversation's mode (conversation_modes).
type modeRow struct {
	conv, from int64
	read       bool
}

// switchDown is the member count at or below which a read-mode
// conversation (not a channel) goes back to write fan-out.
func switchDown(threshold int64) int64 { return threshold / 2 }

// partialMembers says whether a conversation's current members are loaded
// only for the users the batch names: a read-mode conversation too big to
// switch down within the batch (its count minus the batch's removals stays
// above switchDown) and above the threshold. Everything else is loaded
// whole, as write fan-out needs.
func partialMembers(read, channel bool, count, removals, threshold int64) bool {
	if !read {
		return false
	}
	if channel {
		return count > threshold
	}
	return count > max(threshold, switchDown(threshold)+removals)
}

// created sets the mode of a new conversation: read from seq 1 for a
// channel or a conversation created with more members than the threshold.
func (b *batch) created(c *convState, channel bool) {
	c.channel = channel
	c.memberCount = int64(len(c.members))
	c.read = channel || c.memberCount > b.threshold
	b.modes = append(b.modes, modeRow{conv: c.id, from: 1, read: c.read})
}

// joined counts a new member and switches a write-mode conversation up
// after the join message seq when the count passed the threshold.
func (b *batch) joinedLarge(c *convState, user, seq int64) {
	c.memberCount++
	if c.read {
		b.members = append(b.members, projection.Membership{Conv: c.id, User: user, Joined: true})
		return
	}
	if c.memberCount > b.threshold {
		c.read = true
		b.modes = append(b.modes, modeRow{conv: c.id, from: seq + 1, read: true})
	}
}

// switchingDown switches a read-mode conversation (not a channel) to
// write fan-out from the removal about to be added, when the count after
// it falls to switchDown: that removal is then the first message written
// to every member's inbox again, so that no member waits for a later
// message to learn of the switch (the mirror of a switch up, whose
// crossing join is the last message written to all). The members are all
// loaded: partialMembers keeps them whole whenever the batch's removals can
// reach switchDown.
func (b *batch) switchingDown(c *convState) {
	if c.read && !c.channel && c.memberCount-1 <= switchDown(b.threshold) {
		c.read = false
		b.modes = append(b.modes, modeRow{conv: c.id, from: c.lastSeq + 1, read: false})
		b.lastGot = nil
	}
}

// leftLarge counts a removed member; a removal from a read-mode
// conversation is told to the gateways (M token).
func (b *batch) leftLarge(c *convState, user int64) {
	c.memberCount--
	if c.read {
		b.members = append(b.members, projection.Membership{Conv: c.id, User: user})
	}
}

// fanRead gives a read-mode message (seq) to the armed members, disarming
// them, and returns who got it (mention then skips them).
func (b *batch) fanRead(c *convState, seq int64, at time.Time) map[int64]bool {
	got := map[int64]bool{}
	users := make([]int64, 0, len(c.armed))
	for u := range c.armed {
		users = append(users, u)
	}
	sort.Slice(users, func(i, j int) bool { return users[i] < users[j] })
	for _, u := range users {
		// Armed implies a member: a removal disarms.
		delete(c.armed, u)
		b.armedNow[recKey{u, c.id}] = false
		got[u] = true
		b.fan = append(b.fan, fanRow{user: u, conv: c.id, kind: projection.KindMessage, seq: seq, at: at})
	}
	return got
}

// arm marks user armed in read-mode conversation c after a read to its end.
func (b *batch) arm(c *convState, user int64) {
	if c.armed == nil {
		c.armed = map[int64]bool{}
	}
	c.armed[user] = true
	b.armedNow[recKey{user, c.id}] = true
}

// changedRead counts a change of a message of a read-mode conversation:
// the conversation's change count and the message's changed_ord move, and
// no update entry is written.
func (c *convState) changedRead(m *msgState) {
	c.changeCount++
	m.changedOrd = c.changeCount
	c.changed = true
}

// queueModes writes the batch's mode switches and armed flags.
func (b *batch) queueModes(bt *pgx.Batch) {
	if n := len(b.modes); n > 0 {
		cs, fs, rs := make([]int64, n), make([]int64, n), make([]bool, n)
		for i, m := range b.modes {
			cs[i], fs[i], rs[i] = m.conv, m.from, m.read
		}
		bt.Queue(sqlInsertModes, cs, fs, rs)
	}
}

// queueArmed writes the armed flags the batch changed, after the records.
func (b *batch) queueArmed(bt *pgx.Batch) {
	if len(b.armedNow) == 0 {
		return
	}
	keys := make([]recKey, 0, len(b.armedNow))
	for k := range b.armedNow {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].user < keys[j].user || keys[i].user == keys[j].user && keys[i].conv < keys[j].conv
	})
	us, cs, as := make([]int64, len(keys)), make([]int64, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		us[i], cs[i], as[i] = k.user, k.conv, b.armedNow[k]
	}
	bt.Queue(sqlSetArmed, us, cs, as)
}

// encodeLarge adds the read fan-out tokens of the batch: the modes
// switched (a conversation created in write mode is no switch), the joins
// and removals of read-mode conversations, and the read-mode conversations
// that moved.
func (b *batch) encodeLarge(enc *projection.Encoder) {
	for _, m := range b.modes {
		if m.read || m.from > 1 {
			enc.Mode(projection.Mode{Conv: m.conv, From: m.from, Read: m.read})
		}
	}
	for _, m := range b.members {
		enc.Member(m)
	}
	ids := make([]int64, 0)
	for id, c := range b.convs {
		if c.read && c.changed {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		c := b.convs[id]
		enc.Large(projection.Large{Conv: id, LastSeq: c.lastSeq, Changes: c.changeCount})
	}
}
