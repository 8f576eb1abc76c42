package inbox

import "github.com/inboxd/inboxd/protocol"

// The wire form of entries, written by hand (protocol.AppendEntry):
// encoding/json would reflect over every entry and re-validate every cached
// message.

// Entry is an inbox entry as read: its inbox_seq and conversation, and the
// message or record it carries, already in its wire form. A record entry
// carries the record as it is when read (the projections keep only the
// current state), with its current version; versions only grow, so a
// client keeps the highest.
type Entry struct {
	InboxSeq       int64
	ConversationID int64
	kind           string // protocol.KindMessage, KindRecord or KindUpdate
	raw            []byte
}

// NewEntry makes the entry inboxSeq of conversation conv carrying v, a
// *protocol.Message or a *protocol.Record. The reader makes its own; this
// is for code that builds frames or pages from known objects (tests).
func NewEntry(inboxSeq, conv int64, v any) Entry {
	kind := protocol.KindMessage
	if _, record := v.(*protocol.Record); record {
		kind = protocol.KindRecord
	}
	return Entry{InboxSeq: inboxSeq, ConversationID: conv, kind: kind, raw: marshalWire(v)}
}

// appendEntry appends e as a protocol.Entry.
func appendEntry(b []byte, e *Entry) []byte {
	return protocol.AppendEntry(b, e.InboxSeq, e.ConversationID, e.kind, e.raw)
}

// AppendEntries appends entries as a JSON array of protocol.Entry.
func AppendEntries(b []byte, entries []Entry) []byte {
	b = append(b, '[')
	for i := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendEntry(b, &entries[i])
	}
	return append(b, ']')
}

// MarshalJSON lets entries still go through encoding/json where speed does
// not matter.
func (e Entry) MarshalJSON() ([]byte, error) { return appendEntry(nil, &e), nil }

// EntriesSize estimates the encoded size of entries, to size buffers.
func EntriesSize(entries []Entry) int {
	n := 2
	for i := range entries {
		n += 72 + len(entries[i].raw)
	}
	return n
}

// marshalWire is the JSON of v as the API writes it (protocol.Marshal).
func marshalWire(v any) []byte {
	b, err := protocol.Marshal(v)
	if err != nil {
		panic("inbox: encode " + err.Error()) // only the protocol's types
	}
	return b
}
