package projection

import (
	"strconv"
	"strings"
)

// DefaultEphemeralChannel is the NOTIFY channel of typing and presence: what
// the gateways tell each other that is never written to the log or to the
// inbox. Gateways send and listen on it themselves (the projector never
// does); it is separate from DefaultChannel so that a reader of one never
// parses the other's tokens.
const DefaultEphemeralChannel = "inboxd_ephemeral"

// Typing is a member typing in a conversation: for ExpiresMS from its
// arrival, or, with ExpiresMS 0, no longer (the member stopped).
type Typing struct {
	Conv, User int64
	ExpiresMS  int64
}

// Presence is a user's presence as other users may see it: online, or
// offline since LastSeen (Unix milliseconds; 0 when unknown or hidden).
type Presence struct {
	User     int64
	Online   bool
	LastSeen int64
}

// Ephemeral is one decoded payload of the ephemeral channel.
type Ephemeral struct {
	Typing   []Typing
	Presence []Presence
}

// AppendTyping appends the token t<conv>:<user>:<expires_ms> to b, with a
// separating space when b is not empty. Tokens are short (under 70
// bytes), far below MaxPayload.
func AppendTyping(b []byte, t Typing) []byte {
	if len(b) > 0 {
		b = append(b, ' ')
	}
	b = append(b, 't')
	b = strconv.AppendInt(b, t.Conv, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, t.User, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, t.ExpiresMS, 10)
}

// AppendPresence appends the token p<user>:<0|1>:<last_seen_ms> to b, with a
// separating space when b is not empty.
func AppendPresence(b []byte, p Presence) []byte {
	if len(b) > 0 {
		b = append(b, ' ')
	}
	b = append(b, 'p')
	b = strconv.AppendInt(b, p.User, 10)
	if p.Online {
		b = append(b, ":1:"...)
	} else {
		b = append(b, ":0:"...)
	}
	return strconv.AppendInt(b, p.LastSeen, 10)
}

// ParseEphemeral decodes one payload of the ephemeral channel. Unknown
// tokens and tokens that do not parse (negative or non-positive ids
// included) are skipped, so that newer gateways can add kinds.
func ParseEphemeral(payload string) Ephemeral {
	var e Ephemeral
	for _, tok := range strings.Fields(payload) {
		a, b, c, ok := threeInts(tok[1:])
		if !ok || a <= 0 {
			continue
		}
		switch tok[0] {
		case 't':
			if b > 0 && c >= 0 {
				e.Typing = append(e.Typing, Typing{Conv: a, User: b, ExpiresMS: c})
			}
		case 'p':
			if (b == 0 || b == 1) && c >= 0 {
				e.Presence = append(e.Presence, Presence{User: a, Online: b == 1, LastSeen: c})
			}
		}
	}
	return e
}

// threeInts reads <a>:<b>:<c>.
func threeInts(s string) (a, b, c int64, ok bool) {
	as, rest, ok1 := strings.Cut(s, ":")
	bs, cs, ok2 := strings.Cut(rest, ":")
	var err1, err2, err3 error
	a, err1 = strconv.ParseInt(as, 10, 64)
	b, err2 = strconv.ParseInt(bs, 10, 64)
	c, err3 = strconv.ParseInt(cs, 10, 64)
	return a, b, c, ok1 && ok2 && err1 == nil && err2 == nil && err3 == nil
}
