package hub_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/projection"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestHubOnTwoServers: a hub listening to two servers (two databases:
// NOTIFY does not cross databases) wakes each user's waiters from its own
// server's notifications and keeps each server's heads in that server's
// cache; when one server's LISTEN connection is cut, the hub is not
// connected, that server's cache knows nothing while the other's still
// serves, and on the reconnection every waiter is woken to re-read.
func TestHubOnTwoServers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pools [2]*pgxpool.Pool
	var dsns [2]string
	for i := range pools {
		pools[i], dsns[i] = pgtest.NewPool(t)
		// Each server's epoch, which its cache starts at.
		_, err := pools[i].Exec(ctx, `UPDATE meta SET epoch = $1`, 100*(i+1))
		require.NoError(t, err)
	}
	ofUser := func(u int64) int { return int(u % 2) } // even users on server 1, odd on server 2
	h := hub.New(hub.Config{Servers: 2, OfUser: ofUser, WakeJitter: -1})
	connects := make([]func(context.Context) (*pgx.Conn, error), 2)
	for i := range connects {
		dsn := dsns[i]
		connects[i] = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, dsn) }
	}
	done := make(chan error, 1)
	go func() { done <- h.RunServers(ctx, projection.DefaultChannel, 50*time.Millisecond, connects) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	require.Eventually(t, h.Connected, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, [2]int64{100, 200}, [2]int64{h.HeadsOfServer(0).CurrentEpoch(), h.HeadsOfServer(1).CurrentEpoch()},
		"each cache at its server's epoch before any read")

	even, odd := h.SubscribeUser(2), h.SubscribeUser(3)
	defer even.Close()
	defer odd.Close()
	drain := func(s *hub.Subscription) {
		select {
		case <-s.C():
		default:
		}
	}
	drain(even)
	drain(odd)
	// What a read taught each cache.
	heads := h.UserHeads()
	heads.Learn(heads.Generation(2), 2, 100, 4)
	heads.Learn(heads.Generation(3), 3, 200, 6)

	notify := func(server int, user, head int64) {
		var e projection.Encoder
		e.Head(user, head)
		_, err := pools[server].Exec(ctx, `SELECT pg_notify($1, $2)`, projection.DefaultChannel, e.Payloads()[0])
		require.NoError(t, err)
	}
	wait := func(s *hub.Subscription, what string) {
		t.Helper()
		select {
		case <-s.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not woken", what)
		}
	}
	notify(1, 3, 7)
	wait(odd, "user 3 by server 2's notification")
	require.EqualValues(t, 7, odd.Head())
	epoch, head, ok := h.HeadsOf(3).Get(3)
	require.True(t, ok)
	require.Equal(t, [2]int64{200, 7}, [2]int64{epoch, head}, "server 2's cache, at server 2's epoch")
	notify(0, 2, 5)
	wait(even, "user 2 by server 1's notification")
	epoch, head, ok = h.HeadsOf(2).Get(2)
	require.True(t, ok)
	require.Equal(t, [2]int64{100, 5}, [2]int64{epoch, head}, "server 1's cache, at server 1's epoch")
	_, _, ok = h.HeadsOf(2).Get(3)
	require.False(t, ok, "user 3's head is not in server 1's cache")
	select {
	case <-odd.C():
		t.Fatal("user 3 woken by a notification of user 2")
	default:
	}

	// Server 2's LISTEN connection is cut.
	var cut int
	require.NoError(t, pools[1].QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`).Scan(&cut))
	require.Equal(t, 1, cut)
	require.Eventually(t, func() bool { return !h.Connected() }, 10*time.Second, time.Millisecond)
	wait(even, "user 2 on the reconnection")
	wait(odd, "user 3 on the reconnection")
	require.True(t, odd.TakeResync(), "a wake-up to re-read whatever the head says")
	require.Eventually(t, h.Connected, 10*time.Second, 5*time.Millisecond)
	_, _, ok = h.HeadsOf(3).Get(3)
	require.False(t, ok, "server 2's cache starts over")
	_, _, ok = h.HeadsOf(2).Get(2)
	require.True(t, ok, "server 1's cache still serves")
	notify(1, 3, 8)
	wait(odd, "user 3 after the reconnection")
	require.EqualValues(t, 8, odd.Head())
}
