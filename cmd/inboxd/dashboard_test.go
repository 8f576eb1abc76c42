package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/inboxd/inboxd/analytics"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/notifier"
	"github.com/inboxd/inboxd/placement"
	"github.com/inboxd/inboxd/producer"
)

// nameRecorder is a Registerer that keeps the metric names registered.
type nameRecorder struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([a-z_:]+)"`)

func (n *nameRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			n.names[m[1]] = true
		}
	}
	return nil
}
func (n *nameRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = n.Register(c)
	}
}
func (n *nameRecorder) Unregister(prometheus.Collector) bool { return true }

// Every metric the Grafana dashboard queries is one the services export.
func TestDashboardMetricsExist(t *testing.T) {
	rec := &nameRecorder{names: map[string]bool{}}
	// Nothing here connects: the pool and the producer dial lazily.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	defer pool.Close()
	prod, err := producer.New(producer.Config{Brokers: []string{"127.0.0.1:1"}})
	require.NoError(t, err)
	defer prod.Close()
	_, err = fanout.New(fanout.Config{Brokers: []string{"127.0.0.1:1"}, Registerer: rec}, pool)
	require.NoError(t, err)
	_, err = gateway.New(gateway.Config{AuthSecret: []byte("dashboard-test-secret-01234567"), Registerer: rec}, pool, prod)
	require.NoError(t, err)
	_, err = analytics.New(analytics.Config{Brokers: []string{"127.0.0.1:1"}, Registerer: rec})
	require.NoError(t, err)
	_, err = notifier.New(notifier.Config{Brokers: []string{"127.0.0.1:1"}, WebhookURL: "http://127.0.0.1:1/",
		WebhookSecret: []byte("s"), Registerer: rec}, pool)
	require.NoError(t, err)

	registerPlacementMetrics(rec, placement.Single())

	raw, err := os.ReadFile("../../docs/grafana/inboxd-dashboard.json")
	require.NoError(t, err)
	alerts, err := os.ReadFile("../../docs/grafana/inboxd-alerts.yaml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(alerts, &rules))
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			require.NotEmpty(t, r.Expr, "alert %s", r.Alert)
			exprs = append(exprs, r.Expr)
		}
	}
	require.Contains(t, strings.Join(exprs, "\n"), "inboxd_fanout_oldest_unprojected_seconds", "a stuck partition is alerted on")
	require.Contains(t, string(raw), "inboxd_fanout_oldest_unprojected_seconds", "and shown on the dashboard")
	require.Contains(t, strings.Join(exprs, "\n"), `inboxd_notifier_notifications_total{outcome="dead"}`, "dead notifications are alerted on")
	used := regexp.MustCompile(`inboxd_[a-z_]+`).FindAllString(string(raw)+strings.Join(exprs, "\n"), -1)
	require.NotEmpty(t, used)
	for _, m := range used {
		base := m
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		require.True(t, rec.names[base], "the dashboard queries %s, which no service exports", m)
	}
}

// The placement's metrics: its version, and per paused partition the time
// since its move's last step, with the move's target.
func TestPlacementMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	began := time.Now().Add(-90 * time.Second)
	m := placement.NewMap(7, []placement.Server{{ID: 1, Name: "one"}, {ID: 2, Name: "two"}},
		placement.Assignment{Partition: 1, Server: 2, State: placement.Serving},
		placement.Assignment{Partition: 3, Server: 1, State: placement.Moving, Target: 2, UpdatedAt: began})
	registerPlacementMetrics(reg, m)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()
	}
	require.Len(t, got["inboxd_placement_version"], 1)
	require.Equal(t, 7.0, got["inboxd_placement_version"][0].GetGauge().GetValue())
	paused := got["inboxd_placement_partition_paused_seconds"]
	require.Len(t, paused, 1, "the moving partition only")
	labels := map[string]string{}
	for _, l := range paused[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	require.Equal(t, map[string]string{"partition": "3", "target": "2"}, labels)
	require.InDelta(t, 90, paused[0].GetGauge().GetValue(), 5)

	idle := prometheus.NewRegistry()
	registerPlacementMetrics(idle, placement.Single())
	mfs, err = idle.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		require.NotEqual(t, "inboxd_placement_partition_paused_seconds", mf.GetName(), "absent when no move is under way")
	}
}
