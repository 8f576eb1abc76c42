package gateway

import (
	"net/http"
	"strconv"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// MaxPresenceUsers bounds the user_id parameters of GET /v1/presence.
const MaxPresenceUsers = 100

// handlePresence is GET /v1/presence?user_id=1&user_id=2...: the presence
// of the users asked about that the caller may see (the caller and the
// users sharing a current conversation with them; gateway/ephemeral's
// Lookup), but the users the caller blocks. The others are left out,
// whether they exist or not.
func (g *Gateway) handlePresence(w http.ResponseWriter, r *http.Request) error {
	vs := r.URL.Query()["user_id"]
	if len(vs) == 0 || len(vs) > MaxPresenceUsers {
		return apierr.BadRequest("give 1..%d user_id parameters", MaxPresenceUsers)
	}
	users := make([]int64, 0, len(vs))
	for _, v := range vs {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 || v[0] == '+' {
			return apierr.BadRequest("user_id must be a positive integer id")
		}
		users = append(users, id)
	}
	ctx := r.Context()
	list, err := g.eph.Lookup(ctx, userFrom(ctx), users)
	if err != nil {
		return err
	}
	blocked, err := g.blocks.of(ctx, userFrom(ctx))
	if err != nil {
		return err
	}
	kept := []protocol.Presence{}
	for _, p := range list {
		if !blocked.Has(p.UserID) { // the users the caller blocks are left out too
			kept = append(kept, p)
		}
	}
	list = kept
	apierr.WriteJSON(w, http.StatusOK, protocol.PresenceList{Presence: list})
	return nil
}
