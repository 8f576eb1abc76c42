package gateway

import "github.com/inboxd/inboxd/protocol"

// The wire form of entries, written by hand (protocol.AppendEntry):
// encoding/json would reflect over every entry and re-validate every cached
// message.

// appendEntry appends e as a protocol.Entry.
func appendEntry(b []byte, e *entry) []byte {
	kind := protocol.KindMessage
	if e.record {
		kind = protocol.KindRecord
	}
	return protocol.AppendEntry(b, e.InboxSeq, e.ConversationID, kind, e.raw)
}

// appendEntries appends entries as a JSON array.
func appendEntries(b []byte, entries []entry) []byte {
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
func (e entry) MarshalJSON() ([]byte, error) { return appendEntry(nil, &e), nil }

// entriesSize estimates the encoded size of entries, to size buffers.
func entriesSize(entries []entry) int {
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
		panic("gateway: encode " + err.Error()) // only the protocol's types
	}
	return b
}
