package gateway

import (
	"context"
	_ "embed"
	"fmt"
	"net/http"
	"time"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

//go:embed openapi.yaml
var openapiYAML []byte

type statusResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks,omitempty"`
}

// handleHealthz is GET /healthz: the process is alive and serving.
func (g *Gateway) handleHealthz(w http.ResponseWriter, r *http.Request) error {
	apierr.WriteJSON(w, http.StatusOK, statusResponse{Status: "ok"})
	return nil
}

// handleReadyz is GET /readyz: PostgreSQL (every server) answers a ping, a Kafka broker
// answers, (while Listen runs) the LISTEN connection is up, and (with
// AuthJWKSURL) a key set of the identity provider was fetched. Each check
// has a short timeout; a failure is a 503 naming the failing checks.
func (g *Gateway) handleReadyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{"postgres": "ok", "kafka": "ok"}
	ready := true
	if err := g.pool.Ping(ctx); err != nil {
		checks["postgres"], ready = err.Error(), false
	}
	// Every other server of a sharded placement: postgres_2, postgres_3, ...
	for i, pool := range g.srv.Pools[1:] {
		name := fmt.Sprintf("postgres_%d", i+2)
		checks[name] = "ok"
		if err := pool.Ping(ctx); err != nil {
			checks[name], ready = err.Error(), false
		}
	}
	if err := g.prod.Client().Ping(ctx); err != nil {
		checks["kafka"], ready = err.Error(), false
	}
	if g.hub.Listening() {
		checks["listen"] = "ok"
		if !g.hub.Connected() {
			checks["listen"], ready = "not connected", false
		}
	}
	if g.cfg.AuthJWKSURL != "" {
		checks["jwks"] = "ok"
		if err := g.auth.verifier.Ready(); err != nil {
			checks["jwks"], ready = err.Error(), false
		}
	}
	for name, check := range g.cfg.ReadyChecks {
		checks[name] = "ok"
		if err := check(ctx); err != nil {
			checks[name], ready = err.Error(), false
		}
	}
	if g.isDraining() {
		checks["draining"], ready = "shutting down", false
	}
	if !ready {
		w.Header().Set("Retry-After", "1")
		apierr.WriteJSON(w, http.StatusServiceUnavailable, struct {
			Error  protocol.ErrorDetail `json:"error"`
			Checks map[string]string    `json:"checks"`
		}{protocol.ErrorDetail{Code: protocol.CodeUnavailable, Message: "not ready", Retryable: true}, checks})
		return nil
	}
	apierr.WriteJSON(w, http.StatusOK, statusResponse{Status: "ready", Checks: checks})
	return nil
}

// handleMetrics is GET /metrics in the Prometheus exposition format.
func (g *Gateway) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	g.promHandler.ServeHTTP(w, r)
	return nil
}

// handleOpenAPI is GET /openapi.yaml, the OpenAPI 3 document of this API.
func (g *Gateway) handleOpenAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, err := w.Write(openapiYAML)
	return err
}
