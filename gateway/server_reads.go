package gateway

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

const sqlServerInbox = `SELECT COALESCE((SELECT inbox_seq FROM users WHERE id = $1), 0),
	COALESCE((SELECT inbox_floor FROM users WHERE id = $1), 0)`

// handleServerInbox is GET /v1/server/users/{uid}/inbox (scope read).
func (g *Gateway) handleServerInbox(w http.ResponseWriter, r *http.Request) error {
	uid, err := pathID(r, "uid")
	if err != nil {
		return err
	}
	a := protocol.ServerInbox{UserID: uid}
	if err := g.srv.User(uid).QueryRow(r.Context(), sqlServerInbox, uid).Scan(&a.Head, &a.Floor); err != nil {
		return fmt.Errorf("inbox head of user %d: %w", uid, err)
	}
	apierr.WriteJSON(w, http.StatusOK, a)
	return nil
}

const sqlServerConversation = `SELECT title, last_seq, member_count, read_fanout, channel, frozen, slow_mode FROM conversations WHERE id = $1`

// handleServerConversation is GET /v1/server/conversations/{cid} (scope
// read): its last seq, member count and mode.
func (g *Gateway) handleServerConversation(w http.ResponseWriter, r *http.Request) error {
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	a := protocol.ServerConversation{ConversationID: cid, Mode: protocol.ModeWrite}
	var read bool
	err = g.srv.Conv(cid).QueryRow(r.Context(), sqlServerConversation, cid).Scan(&a.Title, &a.LastSeq, &a.MemberCount, &read, &a.Channel,
		&a.Frozen, &a.SlowMode)
	if errors.Is(err, pgx.ErrNoRows) {
		return apierr.NotFound("conversation %d does not exist", cid)
	}
	if err != nil {
		return fmt.Errorf("state of conversation %d: %w", cid, err)
	}
	if read {
		a.Mode = protocol.ModeRead
	}
	apierr.WriteJSON(w, http.StatusOK, a)
	return nil
}
