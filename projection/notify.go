package projection

import (
	"strconv"
	"strings"
)

// DefaultChannel is the NOTIFY channel of committed batches. Writers and
// readers are configured with the same channel; replay's shadow projector
// writes to another, so that nobody listens to a rebuild.
const DefaultChannel = "inboxd"

// MaxPayload is the most bytes of one payload an Encoder writes, under
// PostgreSQL's limit of 8000 bytes per NOTIFY (which refuses longer ones,
// failing the transaction).
const MaxPayload = 7900

// MaxRunEntries bounds the entries of one run (i) token, so that a token
// always fits a payload; Encoder.Run leaves longer runs out. The gateway
// then reads those entries back, as for any user without a run.
const MaxRunEntries = 200

// Run is a user's new message entries announced by a notification: inbox
// entries First, First+1, ... point at the messages Keys ([conversation,
// seq]), in that order.
type Run struct {
	First int64
	Keys  [][2]int64
}

// Notification is one decoded NOTIFY payload. A batch may send several
// payloads; each decodes on its own.
type Notification struct {
	Heads    map[int64]int64 // user id -> inbox head; never nil
	Rejected []string        // msg ids
	Epoch    int64           // a new epoch (a replay swapped the projections), 0 if none
	// Projected maps the event id of each message.sent projected to its
	// message's seq: the sender's gateway answers the send from it.
	Projected map[string]int64
	// Duplicates are event ids of message.sent events whose msg_id was
	// already projected (the sender's gateway reads the original).
	Duplicates []string
	// Runs are the new entries of users whose entries in the batch are all
	// messages (small batches only).
	Runs map[int64]Run
	// Updated are the messages the batch changed: a reader that keeps
	// messages drops its copies older than the version.
	Updated []Updated
	// Reads are the read positions the batch moved (read receipts).
	Reads []Read
	// Large are the read-mode conversations the batch moved
	// (docs/large-conversations.md), Members the changes of their
	// membership, Modes their switches.
	Large   []Large
	Members []Membership
	Modes   []Mode
}

// Large is a read-mode conversation's head and change count after a batch.
type Large struct{ Conv, LastSeq, Changes int64 }

// Membership is a user joining (Joined) or leaving a read-mode
// conversation.
type Membership struct {
	Conv, User int64
	Joined     bool
}

// Mode is a conversation switching to read fan-out (Read) or back, from
// seq From.
type Mode struct {
	Conv, From int64
	Read       bool
}

// Read is a member's new read position in a conversation.
type Read struct{ Conv, User, Seq int64 }

// Updated names a changed message and its version after the batch.
type Updated struct{ Conv, Seq, Version int64 }

// Encoder builds the payloads of one batch's notifications: each method
// adds one token, in call order, and a payload is closed when the next
// token would take it past MaxPayload. The zero value is ready to use. An
// Encoder is not safe for concurrent use.
type Encoder struct {
	payloads []string
	sb       strings.Builder
	buf      []byte
}

// add appends tok to the open payload, or to a new one when it would not
// fit.
func (e *Encoder) add(tok []byte) {
	if e.sb.Len() > 0 && e.sb.Len()+1+len(tok) > MaxPayload {
		e.payloads = append(e.payloads, e.sb.String())
		e.sb.Reset()
	}
	if e.sb.Len() > 0 {
		e.sb.WriteByte(' ')
	}
	e.sb.Write(tok)
}

// Head adds h<user>:<head>: the user's inbox head moved to head.
func (e *Encoder) Head(user, head int64) {
	e.buf = append(e.buf[:0], 'h')
	e.buf = strconv.AppendInt(e.buf, user, 10)
	e.buf = append(e.buf, ':')
	e.buf = strconv.AppendInt(e.buf, head, 10)
	e.add(e.buf)
}

// Run adds i<user>:<first>:<conv>.<seq>,...: the user's new entries are the
// messages r.Keys, numbered from r.First. It reports whether the run was
// announced: a run without keys, with more than MaxRunEntries or too long
// for a payload is left out (readers read such entries back).
func (e *Encoder) Run(user int64, r Run) bool {
	if len(r.Keys) == 0 || len(r.Keys) > MaxRunEntries {
		return false
	}
	e.buf = append(e.buf[:0], 'i')
	e.buf = strconv.AppendInt(e.buf, user, 10)
	e.buf = append(e.buf, ':')
	e.buf = strconv.AppendInt(e.buf, r.First, 10)
	e.buf = append(e.buf, ':')
	for i, k := range r.Keys {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.buf = strconv.AppendInt(e.buf, k[0], 10)
		e.buf = append(e.buf, '.')
		e.buf = strconv.AppendInt(e.buf, k[1], 10)
	}
	if len(e.buf) > MaxPayload {
		return false
	}
	e.add(e.buf)
	return true
}

// Projected adds m<event_id>:<seq>: the message.sent eventID was projected
// as the message seq of its conversation.
func (e *Encoder) Projected(eventID string, seq int64) {
	e.buf = append(append(append(e.buf[:0], 'm'), eventID...), ':')
	e.buf = strconv.AppendInt(e.buf, seq, 10)
	e.add(e.buf)
}

// Duplicate adds d<event_id>: the message.sent eventID was refused because
// its msg_id was already projected.
func (e *Encoder) Duplicate(eventID string) {
	e.buf = append(append(e.buf[:0], 'd'), eventID...)
	e.add(e.buf)
}

// Rejected adds r<msg_id>: a message.sent with msgID was rejected (its
// reason is stored in rejections).
func (e *Encoder) Rejected(msgID string) {
	e.buf = append(append(e.buf[:0], 'r'), msgID...)
	e.add(e.buf)
}

// Updated adds u<conv>.<seq>:<version>: the message (conv, seq) changed;
// its version is now version.
func (e *Encoder) Updated(conv, seq, version int64) {
	e.buf = append(e.buf[:0], 'u')
	e.buf = strconv.AppendInt(e.buf, conv, 10)
	e.buf = append(e.buf, '.')
	e.buf = strconv.AppendInt(e.buf, seq, 10)
	e.buf = append(e.buf, ':')
	e.buf = strconv.AppendInt(e.buf, version, 10)
	e.add(e.buf)
}

// Read adds c<conv>.<user>:<seq>: user's read position in conv moved to
// seq (a read receipt).
func (e *Encoder) Read(conv, user, seq int64) {
	e.buf = append(e.buf[:0], 'c')
	e.buf = strconv.AppendInt(e.buf, conv, 10)
	e.buf = append(e.buf, '.')
	e.buf = strconv.AppendInt(e.buf, user, 10)
	e.buf = append(e.buf, ':')
	e.buf = strconv.AppendInt(e.buf, seq, 10)
	e.add(e.buf)
}

// Large adds L<conv>:<last_seq>:<change_count>: the read-mode conversation
// conv is at last_seq with change_count changes.
func (e *Encoder) Large(l Large) {
	e.buf = append(e.buf[:0], 'L')
	e.buf = appendInts(e.buf, l.Conv, l.LastSeq, l.Changes)
	e.add(e.buf)
}

// Member adds M<conv>:<user>:<1|0>: user joined (1) or left (0) the
// read-mode conversation conv.
func (e *Encoder) Member(m Membership) {
	e.buf = append(e.buf[:0], 'M')
	e.buf = appendInts(e.buf, m.Conv, m.User, boolInt(m.Joined))
	e.add(e.buf)
}

// Mode adds S<conv>:<from>:<1|0>: conv is in read fan-out (1) or write
// fan-out (0) from seq from.
func (e *Encoder) Mode(m Mode) {
	e.buf = append(e.buf[:0], 'S')
	e.buf = appendInts(e.buf, m.Conv, m.From, boolInt(m.Read))
	e.add(e.buf)
}

func appendInts(b []byte, a, c, d int64) []byte {
	b = strconv.AppendInt(b, a, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, c, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, d, 10)
}

func boolInt(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// Epoch adds e<epoch>: a replay swapped in the projections of epoch.
func (e *Encoder) Epoch(epoch int64) {
	e.buf = append(e.buf[:0], 'e')
	e.buf = strconv.AppendInt(e.buf, epoch, 10)
	e.add(e.buf)
}

// Payloads returns the payloads of the tokens added so far, each at most
// MaxPayload bytes (unless one token alone is longer), none empty; nil when
// nothing was added. Send each with pg_notify(channel, payload).
func (e *Encoder) Payloads() []string {
	if e.sb.Len() == 0 {
		return e.payloads
	}
	return append(e.payloads[:len(e.payloads):len(e.payloads)], e.sb.String())
}

// ParseNotification decodes one payload. Unknown tokens and tokens that do
// not parse are skipped, so that newer writers can add kinds.
func ParseNotification(payload string) Notification {
	n := Notification{Heads: map[int64]int64{}}
	for _, tok := range strings.Fields(payload) {
		switch tok[0] {
		case 'h':
			u, h, ok := strings.Cut(tok[1:], ":")
			if !ok {
				continue
			}
			uid, err1 := strconv.ParseInt(u, 10, 64)
			hd, err2 := strconv.ParseInt(h, 10, 64)
			if err1 == nil && err2 == nil {
				n.Heads[uid] = hd
			}
		case 'r':
			n.Rejected = append(n.Rejected, tok[1:])
		case 'e':
			if ep, err := strconv.ParseInt(tok[1:], 10, 64); err == nil {
				n.Epoch = ep
			}
		case 'm':
			id, seq, ok := strings.Cut(tok[1:], ":")
			if sq, err := strconv.ParseInt(seq, 10, 64); ok && err == nil {
				if n.Projected == nil {
					n.Projected = map[string]int64{}
				}
				n.Projected[id] = sq
			}
		case 'd':
			n.Duplicates = append(n.Duplicates, tok[1:])
		case 'u':
			if u, ok := parseUpdated(tok[1:]); ok {
				n.Updated = append(n.Updated, u)
			}
		case 'c':
			if u, ok := parseUpdated(tok[1:]); ok {
				n.Reads = append(n.Reads, Read{Conv: u.Conv, User: u.Seq, Seq: u.Version})
			}
		case 'L', 'M', 'S':
			n.addLarge(tok)
		case 'i':
			if u, r, ok := parseRun(tok[1:]); ok {
				if n.Runs == nil {
					n.Runs = map[int64]Run{}
				}
				n.Runs[u] = r
			}
		}
	}
	return n
}

// addLarge decodes the read-mode tokens L, M and S (three integers).
func (n *Notification) addLarge(tok string) {
	parts := strings.Split(tok[1:], ":")
	if len(parts) != 3 {
		return
	}
	var v [3]int64
	for i, p := range parts {
		x, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return
		}
		v[i] = x
	}
	switch tok[0] {
	case 'L':
		n.Large = append(n.Large, Large{Conv: v[0], LastSeq: v[1], Changes: v[2]})
	case 'M':
		n.Members = append(n.Members, Membership{Conv: v[0], User: v[1], Joined: v[2] == 1})
	case 'S':
		n.Modes = append(n.Modes, Mode{Conv: v[0], From: v[1], Read: v[2] == 1})
	}
}

// parseUpdated reads <conv>.<seq>:<version>.
func parseUpdated(s string) (Updated, bool) {
	key, vs, ok1 := strings.Cut(s, ":")
	cs, ss, ok2 := strings.Cut(key, ".")
	c, err1 := strconv.ParseInt(cs, 10, 64)
	q, err2 := strconv.ParseInt(ss, 10, 64)
	v, err3 := strconv.ParseInt(vs, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil {
		return Updated{}, false
	}
	return Updated{Conv: c, Seq: q, Version: v}, true
}

// parseRun reads <user>:<first>:<conv>.<seq>,...
func parseRun(s string) (int64, Run, bool) {
	us, rest, ok1 := strings.Cut(s, ":")
	fs, list, ok2 := strings.Cut(rest, ":")
	u, err1 := strconv.ParseInt(us, 10, 64)
	first, err2 := strconv.ParseInt(fs, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || list == "" {
		return 0, Run{}, false
	}
	r := Run{First: first}
	for _, item := range strings.Split(list, ",") {
		cs, ss, ok := strings.Cut(item, ".")
		c, err1 := strconv.ParseInt(cs, 10, 64)
		q, err2 := strconv.ParseInt(ss, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return 0, Run{}, false
		}
		r.Keys = append(r.Keys, [2]int64{c, q})
	}
	return u, r, true
}
