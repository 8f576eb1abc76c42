package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Marshal returns v as the wire carries it: encoding/json without HTML
// escaping (bodies are for programs, not HTML) and without the trailing
// newline of an Encoder. An HTTP body is Marshal's bytes plus "\n".
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// The hot paths (sync pages and entries frames) are written by hand:
// encoding/json would reflect over every entry and re-validate the
// message or record JSON the gateway already holds. These appenders write
// the same bytes as Marshal of the corresponding type (the tests check it),
// so the fast path and the declared types cannot drift apart.

// AppendEntry appends the wire form of an Entry whose message (kind
// KindMessage) or record (kind KindRecord) is already encoded as item, in
// Marshal's form. A nil item leaves the field out, as omitempty does.
func AppendEntry(b []byte, inboxSeq, conversationID int64, kind string, item []byte) []byte {
	b = append(b, `{"inbox_seq":`...)
	b = strconv.AppendInt(b, inboxSeq, 10)
	b = append(b, `,"conversation_id":`...)
	b = strconv.AppendInt(b, conversationID, 10)
	switch kind {
	case KindRecord:
		b = append(b, `,"kind":"record"`...)
		if item != nil {
			b = append(b, `,"record":`...)
			b = append(b, item...)
		}
	case KindUpdate:
		b = append(b, `,"kind":"update"`...)
		if item != nil {
			b = append(b, `,"message":`...)
			b = append(b, item...)
		}
	default:
		b = append(b, `,"kind":"message"`...)
		if item != nil {
			b = append(b, `,"message":`...)
			b = append(b, item...)
		}
	}
	return append(b, '}')
}

// AppendSyncPage appends the wire form of a SyncPage. appendEntries
// appends the entries as a JSON array ("[...]", never null), typically with
// AppendEntry.
func AppendSyncPage(b []byte, epoch, head int64, hasMore bool, c Counts, p Polling, large []LargeConv, appendEntries func([]byte) []byte) []byte {
	b = append(b, `{"epoch":`...)
	b = strconv.AppendInt(b, epoch, 10)
	b = append(b, `,"head":`...)
	b = strconv.AppendInt(b, head, 10)
	b = append(b, `,"entries":`...)
	b = appendEntries(b)
	b = append(b, `,"has_more":`...)
	b = strconv.AppendBool(b, hasMore)
	b = append(b, `,"unread_total":`...)
	b = strconv.AppendInt(b, c.UnreadTotal, 10)
	b = append(b, `,"mention_total":`...)
	b = strconv.AppendInt(b, c.MentionTotal, 10)
	b = append(b, `,"_polling":{"next_interval_ms":`...)
	b = strconv.AppendInt(b, p.NextIntervalMS, 10)
	if r := p.Reconnect; r != nil {
		b = append(b, `,"reconnect":{"after_ms":`...)
		b = strconv.AppendInt(b, r.AfterMS, 10)
		b = append(b, `,"window_ms":`...)
		b = strconv.AppendInt(b, r.WindowMS, 10)
		b = append(b, '}')
	}
	b = append(b, '}')
	if len(large) > 0 {
		b = append(b, `,"large":`...)
		b = AppendLarge(b, large)
	}
	return append(b, '}')
}

// AppendLarge appends a large list as a JSON array.
func AppendLarge(b []byte, large []LargeConv) []byte {
	b = append(b, '[')
	for i, l := range large {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"conversation_id":`...)
		b = strconv.AppendInt(b, l.ConversationID, 10)
		b = append(b, `,"last_seq":`...)
		b = strconv.AppendInt(b, l.LastSeq, 10)
		b = append(b, `,"change_count":`...)
		b = strconv.AppendInt(b, l.ChangeCount, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// AppendEntriesFrame appends the wire form of an EntriesFrame;
// appendEntries is as for AppendSyncPage.
func AppendEntriesFrame(b []byte, head int64, appendEntries func([]byte) []byte) []byte {
	b = append(b, `{"type":"entries","entries":`...)
	b = appendEntries(b)
	b = append(b, `,"head":`...)
	b = strconv.AppendInt(b, head, 10)
	return append(b, '}')
}
