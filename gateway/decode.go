package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/protocol"
)

// decodeBody reads r's body (at most MaxRequestBytes, else 413) and decodes
// one JSON object into v: not empty, valid UTF-8, no unknown fields, right
// types, nothing after the object.
func (g *Gateway) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge("request body over %d bytes", mbe.Limit)
		}
		return &Error{Status: http.StatusBadRequest, Code: protocol.CodeBadRequest, Message: "reading the request body failed", Err: err}
	}
	return decodeJSON(raw, v)
}

// decodeJSON is the body decoder shared by every endpoint (and the fuzz
// test). Go's decoder silently replaces invalid UTF-8, so it is checked
// first; NUL and lone surrogate escapes are refused after the decode (see
// text.go).
func decodeJSON(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return badRequest("empty body, expected a JSON object")
	}
	if !utf8.Valid(raw) {
		return badRequest("body is not valid UTF-8")
	}
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if trimmed[0] != '{' {
		return badRequest("body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("%s", describeJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("unexpected data after the JSON object")
	}
	// Only now: the decoder would have hidden these as U+FFFD.
	return checkJSONText(raw)
}

func describeJSONError(err error) string {
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

// parseMsgID returns the canonical (lowercase, hyphenated) form of a uuid.
func parseMsgID(s string) (string, error) {
	if len(s) != 36 {
		return "", badRequest("msg_id must be a uuid like 0f8fad5b-d9cb-469f-a165-70867728950e")
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return "", badRequest("msg_id must be a uuid like 0f8fad5b-d9cb-469f-a165-70867728950e")
	}
	return u.String(), nil
}

// query parameters

// queryInt parses the integer parameter name within [lo, hi]; def when
// absent. A value that is not a plain decimal integer, repeated, or out of
// range is a 400.
func queryInt(q url.Values, name string, def, lo, hi int64) (int64, error) {
	vs, ok := q[name]
	if !ok {
		return def, nil
	}
	if len(vs) != 1 {
		return 0, badRequest("parameter %s given more than once", name)
	}
	v, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || (vs[0] != "" && vs[0][0] == '+') {
		return 0, badRequest("parameter %s must be an integer in %d..%d", name, lo, hi)
	}
	if v < lo || v > hi {
		return 0, badRequest("parameter %s must be an integer in %d..%d", name, lo, hi)
	}
	return v, nil
}

// pathID parses the path wildcard name as a positive id.
func pathID(r *http.Request, name string) (int64, error) {
	s := r.PathValue(name)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || s[0] == '+' {
		return 0, badRequest("%s must be a positive integer id", name)
	}
	return v, nil
}
