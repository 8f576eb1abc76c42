package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// What the tests that kill inboxd processes under load share: the
// environment the processes run with, the processes themselves (started,
// killed at random and started again) and the read of a user's whole
// inbox through a gateway.

// procEnv is the environment of an inboxd process of env: its database,
// brokers and topic, logging warnings only.
func procEnv(env *testenv.Env) []string {
	return []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
		"INBOXD_TOPIC=" + env.Topic, "INBOXD_LOG_LEVEL=warn"}
}

// killedGatewayEnv is base, then the settings of a gateway on port that
// is killed under load: it authenticates with svcSecret, waits 3s for an
// ack (a send past it is retried), limits no rate, hints no reconnection
// and calls no lag too long, so that what the test sees comes from the
// kills and not from the limits.
func killedGatewayEnv(base []string, port int) []string {
	return append(slices.Clone(base), "INBOXD_AUTH_SECRET="+svcSecret, fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", port),
		"INBOXD_ACK_WAIT=3s", "INBOXD_SEND_RATE=100000", "INBOXD_SYNC_RATE=100000", "INBOXD_RECONNECT_HINTS=false",
		"INBOXD_TOO_LONG_LAG=1000000")
}

// killable is a named process a test kills and starts again. port, when
// not 0, is where it answers /readyz.
type killable struct {
	name  string
	port  int
	start func() *testenv.Proc
	proc  *testenv.Proc
}

type killables []*killable

// start starts every process.
func (ks killables) start() {
	for _, k := range ks {
		k.proc = k.start()
	}
}

// waitReady waits until every process with a port is ready.
func (ks killables) waitReady(t *testing.T) {
	t.Helper()
	for _, k := range ks {
		if k.port != 0 {
			waitReady(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", k.port))
		}
	}
}

// killPlan is how killables.kill kills: n times, each after a pause
// between pause and pause+spread, the process down for up to down (0:
// started again at once), then after(i) for the i-th kill (nil: nothing).
// Every duration is drawn in whole milliseconds, so that a seed repeats
// the same choices.
type killPlan struct {
	n                   int
	pause, spread, down time.Duration
	after               func(kill int)
}

// kill kills a random process with SIGKILL and starts it again, as plan
// says, drawing from rnd; it returns the kills by process name.
func (ks killables) kill(rnd *rand.Rand, plan killPlan) map[string]int {
	ms := func(d time.Duration) int { return int(d / time.Millisecond) }
	kills := map[string]int{}
	for i := range plan.n {
		time.Sleep(time.Duration(ms(plan.pause)+rnd.IntN(ms(plan.spread))) * time.Millisecond)
		k := ks[rnd.IntN(len(ks))]
		k.proc.Kill()
		kills[k.name]++
		if plan.down > 0 {
			time.Sleep(time.Duration(rnd.IntN(ms(plan.down))) * time.Millisecond)
		}
		k.proc = k.start()
		if plan.after != nil {
			plan.after(i)
		}
	}
	return kills
}

// stop stops every process (SIGTERM), each of which must exit cleanly.
func (ks killables) stop(t *testing.T) {
	t.Helper()
	for _, k := range ks {
		require.NoError(t, k.proc.Stop(20*time.Second), "%s: %s", k.name, k.proc.Output())
	}
}

// syncAll reads user's whole inbox through the gateway at base, page by
// page, and requires inbox seqs 1, 2, … without a gap; it returns the
// entries and the head of the last page.
func syncAll(t *testing.T, base string, user int64) (entries []protocol.Entry, head int64) {
	t.Helper()
	var after int64
	for {
		req, err := http.NewRequest("GET", fmt.Sprintf("%s/v1/sync?after=%d&limit=200", base, after), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token(t, user))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var page protocol.SyncPage
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.NoError(t, json.NewDecoder(res.Body).Decode(&page))
		res.Body.Close()
		for _, e := range page.Entries {
			require.Equal(t, after+1, e.InboxSeq, "user %d: inbox seqs without a gap", user)
			after = e.InboxSeq
		}
		entries = append(entries, page.Entries...)
		if !page.HasMore {
			return entries, page.Head
		}
	}
}
