package gateway

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/inboxd/inboxd/protocol"
)

// The large list in sync answers (docs/large-conversations.md): the ETag
// covers it, and a held long-poll also ends when it changes.
//
// The 304 without a query (notModified) compares the client's tag with
// "<epoch>.<head>" from the head cache, so it only ever answers users
// whose last read saw no large list: the tag of a user with one has a
// third part and never matches there; such a sync reads (one statement,
// as any sync) and writeSync compares the whole tag. A user's list that
// becomes non-empty goes with an M or S token, on which the hub forgets
// the user's head (or all heads), so a stale two-part tag is not
// confirmed either.

// largeHash is the short hash of a large list in the ETag: "" when the
// list is empty, so that the tags of users without read-mode
// conversations are what they always were.
func largeHash(large []protocol.LargeConv) string {
	if len(large) == 0 {
		return ""
	}
	h := fnv.New64a()
	var b []byte
	for _, l := range large {
		b = strconv.AppendInt(b[:0], l.ConversationID, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, l.LastSeq, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, l.ChangeCount, 10)
		b = append(b, ';')
		_, _ = h.Write(b)
	}
	return strconv.FormatUint(h.Sum64()&(1<<48-1), 36)
}

// etagOf is the validator of a sync answer: the epoch and head it was read
// at and, when the user has read-mode conversations, the hash of its large
// list.
func etagOf(epoch, head int64, large []protocol.LargeConv) string {
	tag := `"` + strconv.FormatInt(epoch, 10) + "." + strconv.FormatInt(head, 10)
	if h := largeHash(large); h != "" {
		tag += "." + h
	}
	return tag + `"`
}

// knownLargeHash is the large hash an If-None-Match says the client has
// (the third part of its one tag), and whether it says one at all: a
// header with several tags or none says nothing.
func knownLargeHash(inm string) (string, bool) {
	t := strings.TrimPrefix(strings.TrimSpace(inm), "W/")
	if len(t) < 2 || t[0] != '"' || t[len(t)-1] != '"' || strings.Contains(t, ",") {
		return "", false
	}
	parts := strings.Split(t[1:len(t)-1], ".")
	switch len(parts) {
	case 2:
		return "", true
	case 3:
		return parts[2], true
	}
	return "", false
}

// largeConvs is the conversation ids of a large list.
func largeConvs(large []protocol.LargeConv) []int64 {
	ids := make([]int64, len(large))
	for i, l := range large {
		ids[i] = l.ConversationID
	}
	return ids
}
