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
// reader blocks (and every record whose last message is one) replaced by
// its protocol.Message.Blocked form: the entries
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
		if e.raw == nil {
			continue
		}
		var raw []byte
		if e.kind == protocol.KindRecord {
			raw = maskedRecord(e.raw, blocked)
		} else {
			raw = maskedMessage(e.raw, blocked)
		}
		if raw == nil {
			continue
		}
		if out == nil {
			out = append([]Entry(nil), entries...)
		}
		out[i].raw = raw
	}
	if out == nil {
		return entries
	}
	return out
}

// maskedMessage is the wire form of the message raw as a reader who
// blocks its sender sees it, nil when it shows whole.
func maskedMessage(raw []byte, blocked Blocked) []byte {
	var s sender
	if json.Unmarshal(raw, &s) != nil || s.Kind == protocol.MessageSystem || !blocked.Has(s.SenderID) {
		return nil
	}
	var m protocol.Message
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	bm := m.Blocked()
	return marshalWire(&bm)
}

// maskedRecord is the wire form of the record raw with its last message
// masked (a record carries its conversation's last message), nil when it
// shows whole.
func maskedRecord(raw []byte, blocked Blocked) []byte {
	var s struct {
		LastMessage *sender `json:"last_message"`
	}
	if json.Unmarshal(raw, &s) != nil || s.LastMessage == nil || s.LastMessage.Kind == protocol.MessageSystem ||
		!blocked.Has(s.LastMessage.SenderID) {
		return nil
	}
	var r protocol.Record
	if json.Unmarshal(raw, &r) != nil || r.LastMessage == nil {
		return nil
	}
	bm := r.LastMessage.Blocked()
	r.LastMessage = &bm
	return marshalWire(&r)
}

// MaskRecords is MaskBlocked for records read outside the inbox (the
// conversation list): a copy of recs whose last messages of blocked
// senders are masked, recs itself when none is.
func MaskRecords(recs []protocol.Record, blocked Blocked) []protocol.Record {
	if len(blocked) == 0 {
		return recs
	}
	var out []protocol.Record
	for i := range recs {
		m := recs[i].LastMessage
		if m == nil || m.Kind == protocol.MessageSystem || !blocked.Has(m.SenderID) {
			continue
		}
		if out == nil {
			out = append([]protocol.Record(nil), recs...)
		}
		bm := m.Blocked()
		out[i].LastMessage = &bm
	}
	if out == nil {
		return recs
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
