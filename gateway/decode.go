package gateway

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
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
			return apierr.TooLarge("request body over %d bytes", mbe.Limit)
		}
		return &Error{Status: http.StatusBadRequest, Code: protocol.CodeBadRequest, Message: "reading the request body failed", Err: err}
	}
	return input.DecodeJSON(raw, v)
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
		return 0, apierr.BadRequest("parameter %s given more than once", name)
	}
	v, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || (vs[0] != "" && vs[0][0] == '+') {
		return 0, apierr.BadRequest("parameter %s must be an integer in %d..%d", name, lo, hi)
	}
	if v < lo || v > hi {
		return 0, apierr.BadRequest("parameter %s must be an integer in %d..%d", name, lo, hi)
	}
	return v, nil
}

// pathID parses the path wildcard name as a positive id.
func pathID(r *http.Request, name string) (int64, error) {
	s := r.PathValue(name)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || s[0] == '+' {
		return 0, apierr.BadRequest("%s must be a positive integer id", name)
	}
	return v, nil
}
