package inbox

import (
	"encoding/json"

	"github.com/inboxd/inboxd/protocol"
)

// Blocked is a set of users a reader blocks (docs/protocol.md, "Blocks").
// A nil or empty set blocks nobody. It is never modified once made, so
// readers share it without a lock.
type Blocked map[int64]struct{}

// Has says whether the set holds user.
func (b Blocked) Has(user int64) bool {
	_, ok := b[user]
	return ok
}

// sender is what MaskBlocked reads of a message's wire form.
type sender struct {
	SenderID int64  `json:"sender_id"`
	Kind     string `json:"kind"`
}

// MaskBlocked returns entries with every text message whose sender the
// reader blocks replaced by its protocol.Message.Blocked form: the entries
// keep their inbox_seq, so the stream stays contiguous. entries itself is
// not modified (its wire forms may be shared with a cache): a copy is
// returned when anything is masked. Without blocks it costs nothing; with
// them, one small decode per message entry.
func MaskBlocked(entries []Entry, blocked Blocked) []Entry {
	if len(blocked) == 0 {
		return entries
	}
	var out []Entry
	for i := range entries {
		e := &entries[i]
		if e.kind == protocol.KindRecord || e.raw == nil {
			continue
		}
		var s sender
		if json.Unmarshal(e.raw, &s) != nil || s.Kind == protocol.MessageSystem || !blocked.Has(s.SenderID) {
			continue
		}
		var m protocol.Message
		if json.Unmarshal(e.raw, &m) != nil {
			continue
		}
		if out == nil {
			out = append([]Entry(nil), entries...)
		}
		bm := m.Blocked()
		out[i].raw = marshalWire(&bm)
	}
	if out == nil {
		return entries
	}
	return out
}

// MaskMessages is MaskBlocked for messages read outside the inbox
// (history): a copy of msgs with the blocked senders' text messages
// replaced, msgs itself when none is.
func MaskMessages(msgs []protocol.Message, blocked Blocked) []protocol.Message {
	if len(blocked) == 0 {
		return msgs
	}
	var out []protocol.Message
	for i := range msgs {
		if msgs[i].Kind == protocol.MessageSystem || !blocked.Has(msgs[i].SenderID) {
			continue
		}
		if out == nil {
			out = append([]protocol.Message(nil), msgs...)
		}
		out[i] = msgs[i].Blocked()
	}
	if out == nil {
		return msgs
	}
	return out
}
