package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/gateway/ephemeral"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// The user's own settings (GET and PATCH /v1/settings): account state in
// user_settings, written here directly, not through the log (a replay
// keeps it). A change of hide_presence publishes the user's presence as
// others now see it, in the same transaction. notifications (default true)
// is read by the notifier (docs/notifications.md).

const sqlGetSettings = `SELECT hide_receipts, hide_presence, notifications FROM user_settings WHERE user_id = $1`

// sqlHidden is hide_presence before a change (under the presence lock).
const sqlHidden = `SELECT COALESCE((SELECT hide_presence FROM user_settings WHERE user_id = $1), false)`

// sqlPatchSettings applies the given fields ($2, $3, $4; NULL keeps) and
// returns the settings after the change.
const sqlPatchSettings = `INSERT INTO user_settings (user_id, hide_receipts, hide_presence, notifications, updated_at)
VALUES ($1, COALESCE($2, false), COALESCE($3, false), COALESCE($4, true), now())
ON CONFLICT (user_id) DO UPDATE SET hide_receipts = COALESCE($2, user_settings.hide_receipts),
	hide_presence = COALESCE($3, user_settings.hide_presence),
	notifications = COALESCE($4, user_settings.notifications), updated_at = now()
RETURNING hide_receipts, hide_presence, notifications`

// handleGetSettings is GET /v1/settings: the caller's settings (the
// defaults until changed: hiding off, notifications on).
func (g *Gateway) handleGetSettings(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	out := protocol.DefaultSettings()
	err := g.pool.QueryRow(ctx, sqlGetSettings, user).Scan(&out.HideReceipts, &out.HidePresence, &out.Notifications)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("settings of user %d: %w", user, err)
	}
	apierr.WriteJSON(w, http.StatusOK, out)
	return nil
}

// handlePatchSettings is PATCH /v1/settings: at least one field; absent or
// null fields stay. It answers the settings after the change.
func (g *Gateway) handlePatchSettings(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	var p protocol.SettingsPatch
	if err := g.decodeBody(w, r, &p); err != nil {
		return err
	}
	if p.HideReceipts == nil && p.HidePresence == nil && p.Notifications == nil {
		return apierr.BadRequest("give at least one of hide_receipts, hide_presence, notifications")
	}
	out, err := g.patchSettings(ctx, user, p)
	if err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusOK, out)
	return nil
}

// patchSettings writes p; a change of hide_presence takes the user's
// presence lock first and announces the presence others see now.
func (g *Gateway) patchSettings(ctx context.Context, user int64, p protocol.SettingsPatch) (protocol.Settings, error) {
	var out protocol.Settings
	err := pgx.BeginTxFunc(ctx, g.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var wasHidden bool
		if p.HidePresence != nil {
			if err := ephemeral.LockUser(ctx, tx, user); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, sqlHidden, user).Scan(&wasHidden); err != nil {
				return err
			}
		}
		if err := tx.QueryRow(ctx, sqlPatchSettings, user, p.HideReceipts, p.HidePresence, p.Notifications).
			Scan(&out.HideReceipts, &out.HidePresence, &out.Notifications); err != nil {
			return err
		}
		if p.HidePresence != nil && out.HidePresence != wasHidden {
			return g.eph.Announce(ctx, tx, user, out.HidePresence)
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("change settings of user %d: %w", user, err)
	}
	return out, nil
}
