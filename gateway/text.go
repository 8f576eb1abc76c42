package gateway

import (
	"strings"
	"unicode/utf8"
)

// Text that PostgreSQL cannot store must never reach the log: one such event
// would fail its projection every time it is tried. Every entry point (the
// HTTP bodies through decodeJSON, the WebSocket frames through
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

// checkJSONText checks the string escapes of raw, a JSON text that has
// already been decoded without error (so every backslash starts an escape
// inside a string). It refuses \u0000 and lone surrogates.
func checkJSONText(raw []byte) error {
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
			return badRequest("a string contains NUL (\\u0000) at byte %d; text must not contain U+0000", i)
		case r >= 0xdc00 && r <= 0xdfff:
			return badRequest("a string contains a lone surrogate \\u%04x at byte %d; text must be Unicode characters", r, i)
		case r >= 0xd800 && r <= 0xdbff:
			low, ok := rune(0), false
			if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				low, ok = hex4(raw, i+8)
			}
			if !ok || low < 0xdc00 || low > 0xdfff {
				return badRequest("a string contains a lone surrogate \\u%04x at byte %d; text must be Unicode characters", r, i)
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

// checkText refuses a decoded text value that PostgreSQL cannot store:
// invalid UTF-8 or NUL. The decoders have refused both already; this keeps
// a value that reaches a handler another way (a test, a future entry point)
// from being appended.
func checkText(field, s string) error {
	if !utf8.ValidString(s) {
		return badRequest("%s is not valid UTF-8", field)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return badRequest("%s must not contain NUL (U+0000)", field)
	}
	return nil
}
