package gateway

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/protocol"
)

// TestWSHandshakeRefusalErrorShape: a request that asks for the upgrade
// but that the WebSocket handshake refuses (no Sec-WebSocket-Key, an
// unsupported version) is answered in the error shape like every other
// non-2xx answer, not with the upgrader's plain-text "Bad Request".
func TestWSHandshakeRefusalErrorShape(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{})
	u := w.user(t, 1)
	for name, hdr := range map[string][]string{
		"no key":      {"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13"},
		"bad version": {"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "8", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
	} {
		r := u.do(t, "GET", "/v1/ws", nil, hdr...)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", name, r)
		require.Contains(t, r.header.Get("Content-Type"), "application/json", name)
		var e protocol.ErrorBody
		r.decode(t, &e)
		require.Equal(t, protocol.CodeBadRequest, e.Error.Code, name)
		require.NotEmpty(t, e.Error.Message, name)
	}
}
