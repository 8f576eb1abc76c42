package fanout_test

import (
	"os"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
)

// killConfig is a group configuration of the failover figures.
type killConfig struct {
	name string
	env  []string
}

// killFigureConfigs are the configurations docs/decisions.md compares.
var killFigureConfigs = []killConfig{
	{"defaults", nil},
	{"dynamic-45s", []string{"INBOXD_INSTANCE_ID=", "INBOXD_SESSION_TIMEOUT=45s"}}, // the dynamic membership of the first releases
	{"dynamic-6s", []string{"INBOXD_INSTANCE_ID=", "INBOXD_SESSION_TIMEOUT=6s"}},
	{"static-6s", []string{"INBOXD_INSTANCE_ID=fanout-{slot}", "INBOXD_SESSION_TIMEOUT=6s"}},
}

// BenchmarkFanoutFailover measures the partition pause after kill -9 of
// one of two fanouts (6 partitions, a probe per partition every 100 ms),
// per group configuration: one kill without restart (the other fanout
// takes over), and twenty kills with restarts, one every 3-4 s. Each
// iteration is a run of its own; the metrics are over every iteration's
// pauses. Against a real Kafka with INBOXD_TEST_KAFKA_BROKERS
// (docs/benchmarks.md has the commands).
func BenchmarkFanoutFailover(b *testing.B) {
	backend := "kfake"
	if v := os.Getenv(testenv.EnvBrokers); v != "" {
		backend = "kafka " + v
	}
	b.Logf("backend: %s", backend)
	for _, c := range killFigureConfigs {
		b.Run(c.name+"/one-kill", func(b *testing.B) {
			benchKills(b, killScenario{Env: c.env, Kills: 1, Every: 5 * time.Second, Deadline: 3 * time.Minute, Seed: 1})
		})
		b.Run(c.name+"/kills", func(b *testing.B) {
			benchKills(b, killScenario{Env: c.env, Kills: 20, Every: 3 * time.Second, Jitter: time.Second,
				Restart: true, Deadline: 3 * time.Minute, Seed: 2})
		})
	}
}

// benchKills runs sc b.N times and reports its pauses: p50 and max (lower
// bounds when lower-bounds is above 0: some probes were never projected),
// the runs with a problem (anything lost or doubled, see killOutcome),
// the most members the group had and how long it was not stable.
func benchKills(b *testing.B, sc killScenario) {
	var all killOutcome
	lower, problems := 0, 0
	for range b.N {
		o := runKillScenario(b, sc)
		o.log(b)
		all.Pauses = append(all.Pauses, o.Pauses...)
		all.MaxMembers = max(all.MaxMembers, o.MaxMembers)
		all.Unstable += o.Unstable
		if o.Lower {
			lower++
		}
		if o.Problem != "" {
			problems++
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(all.quantile(0.5).Seconds(), "pause-p50-s")
	b.ReportMetric(all.max().Seconds(), "pause-max-s")
	b.ReportMetric(float64(lower), "lower-bounds")
	b.ReportMetric(float64(problems), "problems")
	b.ReportMetric(float64(all.MaxMembers), "max-members")
	b.ReportMetric(all.Unstable.Seconds()/float64(b.N), "unstable-s")
}
