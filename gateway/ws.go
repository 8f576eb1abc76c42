package gateway

import (
	"context"
	"net/http"

	"github.com/inboxd/inboxd/gateway/write"
	"github.com/inboxd/inboxd/gateway/ws"
	"github.com/inboxd/inboxd/protocol"
)

// WSConfig configures the WebSocket endpoint GET /v1/ws; see ws.Config.
type WSConfig = ws.Config

// WebSocket is the WebSocket endpoint GET /v1/ws; see ws.Server.
type WebSocket = ws.Server

// NewWebSocket builds a WebSocket endpoint over g's hub, inbox reader,
// authentication, send path and rate limits (New builds the one of GET
// /v1/ws; tests and the benchmark mount more). A zero cfg.MaxFrameBytes is
// Config.MaxRequestBytes, a nil cfg.Registerer Config.Registerer, so a
// gateway has at most one endpoint per registry.
func (g *Gateway) NewWebSocket(cfg WSConfig) (*WebSocket, error) {
	if cfg.MaxFrameBytes == 0 {
		cfg.MaxFrameBytes = g.cfg.MaxRequestBytes
	}
	if cfg.Registerer == nil {
		cfg.Registerer = g.cfg.Registerer
	}
	var adm ws.Admission
	if g.reconnects != nil {
		adm = g.reconnects
	}
	s, err := ws.New(cfg, ws.Deps{
		Admission: adm,
		Inbox:     g.inbox,
		Hub:       g.hub,
		Auth:      g.auth,
		Sender:    wsWrites{g.sends, g.changes},
		Changer:   wsWrites{g.sends, g.changes},
		Rebaser: &rebaser{srv: g.srv, blocks: g.blocks, limit: g.cfg.PageDefault, held: &g.held, maxHeld: g.cfg.MaxHeldPolls,
			interval: g.cfg.PollInterval},
		ConnectLimits: g.syncLimits,
		SendLimits:    g.sendLimits,
		Ephemeral:     g.eph,
		Blocks:        g.blocks,
		Draining:      g.draining,
		Logger:        g.log,
	})
	if err == nil {
		g.auth.revoked.watch(s)
	}
	return s, err
}

// handleWS is GET /v1/ws on the gateway's own endpoint.
func (g *Gateway) handleWS(w http.ResponseWriter, r *http.Request) error {
	g.ws.ServeHTTP(w, r)
	return nil
}

// wsWrites is the write path as the WebSocket server sees it (ws.Sender,
// ws.Changer): its request types are the write path's, field for field.
type wsWrites struct {
	sends   *write.Sender
	changes *write.Changer
}

// Send implements ws.Sender.
func (w wsWrites) Send(ctx context.Context, user int64, req ws.SendRequest) (ws.SendAnswer, error) {
	res, err := w.sends.Send(ctx, user, write.SendRequest(req))
	switch {
	case err != nil:
		return ws.SendAnswer{}, err
	case res.Status == write.Pending:
		return ws.SendAnswer{Pending: true}, nil
	}
	return ws.SendAnswer{Seq: res.Message.Seq, Attachments: res.Message.Attachments}, nil
}

// Change implements ws.Changer.
func (w wsWrites) Change(ctx context.Context, user int64, req ws.ChangeRequest) (*protocol.Message, bool, error) {
	return w.changes.Change(ctx, user, write.ChangeRequest(req))
}
