// Package input checks what clients send, for every entry point of the
// gateway (the HTTP bodies and the WebSocket frames): JSON decoding with
// the errors a client can act on, text PostgreSQL cannot store, and the
// form of msg_ids. Its errors are bad_request *apierr.Error values. It does
// no I/O.
package input

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
)

// Text that PostgreSQL cannot store must never reach the log: one such event
// would fail its projection every time it is tried. Every entry point (the
// HTTP bodies through DecodeJSON, the WebSocket frames through
// decodeInbound) refuses, before anything is appended:
//   - invalid UTF-8 (checked on the raw bytes: Go's JSON decoder would
//     replace it with U+FFFD),
//   - NUL, U+0000 (only possible as the escape \u0000: a raw control byte
//     is not valid JSON),
//   - lone surrogates, \ud800-\udfff escapes that are not a high-low pair
//     (the decoder would also turn them into U+FFFD, hiding that the client
//     sent something that is not text).
// U+FFFD itself is a valid character and passes. events.Validate, which the
// producer runs, refuses NUL and invalid UTF-8 as well (see
// docs/events.md); the checks here are the ones a client sees.

// CheckJSONText checks the string escapes of raw, a JSON text that has
// already been decoded without error (so every backslash starts an escape
// inside a string). It refuses \u0000 and lone surrogates.
func CheckJSONText(raw []byte) error {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if i+1 >= len(raw) {
			return nil // not valid JSON: the decoder said so already
		}
		if raw[i+1] != 'u' {
			i++ // \" \\ \/ \b \f \n \r \t
			continue
		}
		r, ok := hex4(raw, i+2)
		if !ok {
			return nil
		}
		switch {
		case r == 0:
			return apierr.BadRequest("a string contains NUL (\\u0000) at byte %d; text must not contain U+0000", i)
		case r >= 0xdc00 && r <= 0xdfff:
			return apierr.BadRequest("a string contains a lone surrogate \\u%04x at byte %d; text must be Unicode characters", r, i)
		case r >= 0xd800 && r <= 0xdbff:
			low, ok := rune(0), false
			if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				low, ok = hex4(raw, i+8)
			}
			if !ok || low < 0xdc00 || low > 0xdfff {
				return apierr.BadRequest("a string contains a lone surrogate \\u%04x at byte %d; text must be Unicode characters", r, i)
			}
			i += 11 // the pair
		default:
			i += 5
		}
	}
	return nil
}

// hex4 parses the four hex digits of a \u escape at raw[at:].
func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// CheckText refuses a decoded text value that PostgreSQL cannot store:
// invalid UTF-8 or NUL. The decoders have refused both already; this keeps
// a value that reaches a handler another way (a test, a future entry point)
// from being appended.
func CheckText(field, s string) error {
	if !utf8.ValidString(s) {
		return apierr.BadRequest("%s is not valid UTF-8", field)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return apierr.BadRequest("%s must not contain NUL (U+0000)", field)
	}
	return nil
}

// DecodeJSON is the body decoder shared by every endpoint (and the fuzz
// test). Go's decoder silently replaces invalid UTF-8, so it is checked
// first; NUL and lone surrogate escapes are refused after the decode (see
// text.go).
func DecodeJSON(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return apierr.BadRequest("empty body, expected a JSON object")
	}
	if !utf8.Valid(raw) {
		return apierr.BadRequest("body is not valid UTF-8")
	}
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if trimmed[0] != '{' {
		return apierr.BadRequest("body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apierr.BadRequest("%s", DescribeJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return apierr.BadRequest("unexpected data after the JSON object")
	}
	// Only now: the decoder would have hidden these as U+FFFD.
	return CheckJSONText(raw)
}

// DescribeJSONError says what is wrong with a body that encoding/json
// refused, in words for the client.
func DescribeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, not %s", te.Field, jsonType(te.Type.Kind().String()), te.Value)
		}
		return fmt.Sprintf("expected %s, not %s", jsonType(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "malformed JSON: unexpected end of body"
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "malformed JSON: " + err.Error()
}

func jsonType(kind string) string {
	switch kind {
	case "int64", "int", "int32":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "ptr":
		return "a value of another type"
	}
	return "a " + kind
}

// ParseMsgID returns the canonical (lowercase, hyphenated) form of a uuid.
func ParseMsgID(s string) (string, error) {
	if len(s) != 36 {
		return "", apierr.BadRequest("msg_id must be a uuid like 0f8fad5b-d9cb-469f-a165-70867728950e")
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return "", apierr.BadRequest("msg_id must be a uuid like 0f8fad5b-d9cb-469f-a165-70867728950e")
	}
	return u.String(), nil
}
