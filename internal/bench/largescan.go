package bench

import (
	"bytes"
	"strconv"
)

// The receivers' fast path for the frames of the large conversation: 15,000
// sessions at 100 msg/s are 1.5 million messages a second to a few worker
// processes on the same machine as the gateway, and json.Unmarshal of each
// (reflection, a struct per message) would make the load generator the
// bottleneck of the figure it measures. scanMessagesFrame reads only what
// the figure needs (the conversation, each message's seq and body) from
// the gateway's encoding (encoding/json of protocol.MessagesFrame, fields in
// declaration order). Anything it does not recognise returns ok false and
// the caller decodes the frame in full.

var (
	msgsFramePrefix = []byte(`{"type":"messages","conversation_id":`)
	msgsArray       = []byte(`"messages":[`)
	msgOpen         = []byte(`{"conversation_id":`)
	msgSeq          = []byte(`,"seq":`)
	msgBody         = []byte(`,"body":`)
	changedArray    = []byte(`],"changed":[`)
)

// scannedMsg is a message of a scanned frame: its seq and its body as
// raw JSON (only a string body is cut out; other bodies are nil).
type scannedMsg struct {
	seq  int64
	body []byte
}

// scanMessagesFrame returns the conversation of a messages frame and its
// messages (not its changed ones), appended to out.
func scanMessagesFrame(data []byte, out []scannedMsg) (conv int64, msgs []scannedMsg, ok bool) {
	rest, found := bytes.CutPrefix(data, msgsFramePrefix)
	if !found {
		return 0, out, false
	}
	conv, rest, ok = scanInt(rest)
	if !ok {
		return 0, out, false
	}
	if i := bytes.Index(rest, msgsArray); i >= 0 {
		rest = rest[i+len(msgsArray):]
	} else {
		return 0, out, false
	}
	// The messages array ends where the changed one begins; bodies are
	// strings without brackets in the bench, but any body is skipped as
	// a JSON string, so the search below never looks inside one.
	for {
		if len(rest) > 0 && rest[0] == ',' {
			rest = rest[1:]
		}
		if bytes.HasPrefix(rest, changedArray) || (len(rest) > 0 && rest[0] == ']') {
			return conv, out, true
		}
		var m scannedMsg
		if m, rest, ok = scanMessage(rest); !ok {
			return 0, out, false
		}
		out = append(out, m)
	}
}

// scanMessage reads one message object at the start of b and returns the
// rest after its closing brace.
func scanMessage(b []byte) (scannedMsg, []byte, bool) {
	var m scannedMsg
	rest, found := bytes.CutPrefix(b, msgOpen)
	if !found {
		return m, b, false
	}
	if _, rest, found = scanInt(rest); !found {
		return m, b, false
	}
	if rest, found = bytes.CutPrefix(rest, msgSeq[1:]); !found {
		return m, b, false
	}
	if m.seq, rest, found = scanInt(rest); !found {
		return m, b, false
	}
	i := bytes.Index(rest, msgBody)
	if i < 0 {
		return m, b, false
	}
	rest = rest[i+len(msgBody):]
	if len(rest) > 0 && rest[0] == '"' {
		end := stringEnd(rest)
		if end < 0 {
			return m, b, false
		}
		m.body, rest = rest[:end], rest[end:]
	}
	// The rest of the object holds no string but created_at and edited_at
	// (no braces inside) and reactions (objects whose strings are emoji,
	// escaped by encoding/json when they are quotes or backslashes): skip
	// to the brace that closes the message, strings skipped whole.
	depth := 1
	for j := 0; j < len(rest); j++ {
		switch rest[j] {
		case '"':
			end := stringEnd(rest[j:])
			if end < 0 {
				return m, b, false
			}
			j += end - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return m, rest[j+1:], true
			}
		}
	}
	return m, b, false
}

// scanInt reads a decimal integer at the start of b, followed by a comma,
// and returns what follows the comma.
func scanInt(b []byte) (int64, []byte, bool) {
	i := 0
	for i < len(b) && (b[i] >= '0' && b[i] <= '9' || i == 0 && b[i] == '-') {
		i++
	}
	n, err := strconv.ParseInt(string(b[:i]), 10, 64)
	if err != nil || i >= len(b) || b[i] != ',' {
		return 0, b, false
	}
	return n, b[i+1:], true
}

// stringEnd is the length of the JSON string at the start of b (quotes
// included), or -1.
func stringEnd(b []byte) int {
	for j := 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}
