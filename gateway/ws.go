package gateway

import (
	"net/http"

	"github.com/inboxd/inboxd/gateway/ws"
)

// WSConfig configures the WebSocket endpoint GET /v1/ws; see ws.Config.
type WSConfig = ws.Config

// WebSocket is the WebSocket endpoint GET /v1/ws; see ws.Server.
type WebSocket = ws.Server

// Defaults of WSConfig.
const (
	DefaultWSHeartbeat        = ws.DefaultHeartbeat
	DefaultWSWriteTimeout     = ws.DefaultWriteTimeout
	DefaultWSHelloTimeout     = ws.DefaultHelloTimeout
	DefaultWSSlowTimeout      = ws.DefaultSlowTimeout
	DefaultWSQueueBytes       = ws.DefaultQueueBytes
	DefaultWSControlQueue     = ws.DefaultControlQueue
	DefaultWSPushBatch        = ws.DefaultPushBatch
	DefaultWSPushWindow       = ws.DefaultPushWindow
	DefaultWSPushWorkers      = ws.DefaultPushWorkers
	DefaultWSLargePushRate    = ws.DefaultLargePushRate
	DefaultWSPushMaxSessions  = ws.DefaultPushMaxSessions
	DefaultWSMaxConns         = ws.DefaultMaxConns
	DefaultWSMaxConnsPerUser  = ws.DefaultMaxConnsPerUser
	DefaultWSMaxInflightSends = ws.DefaultMaxInflightSends
	DefaultWSCloseGrace       = ws.DefaultCloseGrace
	DefaultWSRetryAfter       = ws.DefaultRetryAfter
)

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
		Sender:    g.sends,
		Changer:   g.changes,
		Rebaser: &rebaser{db: g.pool, limit: g.cfg.PageDefault, held: &g.held, maxHeld: g.cfg.MaxHeldPolls,
			interval: g.cfg.PollInterval},
		ConnectLimits: g.syncLimits,
		SendLimits:    g.sendLimits,
		Ephemeral:     g.eph,
		Draining:      g.draining,
		Logger:        g.log,
	})
	return s, err
}

// handleWS is GET /v1/ws on the gateway's own endpoint.
func (g *Gateway) handleWS(w http.ResponseWriter, r *http.Request) error {
	g.ws.ServeHTTP(w, r)
	return nil
}
