// Package app wires the components into the processes that cmd/inboxd runs:
// it opens PostgreSQL and Kafka with start-up backoff, serves the operator
// endpoints, and assembles `inboxd dev`. Logic of the components stays in
// their packages; this package only connects them.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/migrations"
)

// startupBackoff retries until ctx ends, at most every 5 s.
func startupBackoff(ctx context.Context) backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 200 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = 0
	return backoff.WithContext(b, ctx)
}

// OpenDB connects to PostgreSQL, waiting with backoff while it is not up,
// and applies the migrations when migrate is set.
func OpenDB(ctx context.Context, url string, maxConns int32, migrate bool, log *slog.Logger) (*pgxpool.Pool, error) {
	if url == "" {
		return nil, errors.New("no database URL (set --database-url or DATABASE_URL)")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	var pool *pgxpool.Pool
	op := func() error {
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return err
		}
		if err := p.Ping(ctx); err != nil {
			p.Close()
			return err
		}
		pool = p
		return nil
	}
	err = backoff.RetryNotify(op, startupBackoff(ctx), func(err error, d time.Duration) {
		log.Warn("waiting for PostgreSQL", "host", cfg.ConnConfig.Host, "port", cfg.ConnConfig.Port, "err", err, "retry_in", d)
	})
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if migrate {
		err := backoff.RetryNotify(func() error { return migrations.Up(ctx, pool) }, startupBackoff(ctx), func(err error, d time.Duration) {
			log.Warn("migrating failed, retrying", "err", err, "retry_in", d)
		})
		if err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}

// WaitKafka waits with backoff until the brokers answer.
func WaitKafka(ctx context.Context, brokers []string, log *slog.Logger) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	return backoff.RetryNotify(func() error {
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return cl.Ping(c)
	}, startupBackoff(ctx), func(err error, d time.Duration) {
		log.Warn("waiting for Kafka", "brokers", brokers, "err", err, "retry_in", d)
	})
}

// NewRegistry returns a Prometheus registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// OpsMux serves /healthz (alive), /readyz (ready() == nil) and /metrics.
// An error of ready that has a ReadyStatus method (fanout's DegradedError)
// is answered with that status and itself as "detail".
func OpsMux(reg *prometheus.Registry, ready func(context.Context) error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		if err := ready(ctx); err != nil {
			body := map[string]any{"status": "unavailable", "error": err.Error()}
			var st interface{ ReadyStatus() string }
			if errors.As(err, &st) {
				body["status"], body["detail"] = st.ReadyStatus(), st
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(body)
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}`))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// Ready checks PostgreSQL and Kafka, then each of more (a service's own
// state, such as the fanout's partitions).
func Ready(pool *pgxpool.Pool, cl *kgo.Client, more ...func() error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("postgresql: %w", err)
		}
		if cl != nil {
			if err := cl.Ping(ctx); err != nil {
				return fmt.Errorf("kafka: %w", err)
			}
		}
		for _, check := range more {
			if err := check(); err != nil {
				return err
			}
		}
		return nil
	}
}

// Serve runs an HTTP server on addr until ctx ends, then shuts it down
// within drain.
func Serve(ctx context.Context, addr string, h http.Handler, drain time.Duration, log *slog.Logger) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("serving HTTP", "addr", addr)
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}
