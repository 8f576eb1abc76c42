package deploy

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// checkSharded checks profile "sharded" after its traffic: the catalog
// (postgres) places the partitions over two servers, postgres-2 knows it
// is server 2 and projected what its partitions got, and every gateway
// reads both servers.
func checkSharded(t *testing.T, ctx context.Context, tp *topology, logf func(string, ...any)) {
	connect := func(name string) *pgx.Conn {
		in := tp.instances[name][0]
		env := in.svc.Environment
		a, err := in.addr(5432)
		require.NoError(t, err)
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], a, env["POSTGRES_DB"]))
		require.NoError(t, err, name)
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	catalog, second := connect("postgres"), connect("postgres-2")
	var servers, onSecond int
	require.NoError(t, catalog.QueryRow(ctx, `SELECT count(*) FROM shard_servers`).Scan(&servers))
	require.NoError(t, catalog.QueryRow(ctx, `SELECT count(*) FROM placement WHERE server = 2 AND state = 'serving'`).Scan(&onSecond))
	require.Equal(t, 2, servers, "the migrate job added postgres-2")
	require.Equal(t, 6, onSecond, "half of the 12 partitions on server 2")
	var id int32
	require.NoError(t, second.QueryRow(ctx, `SELECT server FROM shard_identity`).Scan(&id))
	require.Equal(t, int32(2), id)
	var projected [2]int64
	require.NoError(t, catalog.QueryRow(ctx, `SELECT (SELECT count(*) FROM users)`).Scan(&projected[0]))
	require.NoError(t, second.QueryRow(ctx, `SELECT (SELECT count(*) FROM users)`).Scan(&projected[1]))
	logf("placement: 2 servers, 6 partitions on postgres-2; users projected %d on postgres, %d on postgres-2", projected[0], projected[1])
	require.Positive(t, projected[0]+projected[1])
	for _, gw := range byCommand(tp, "inboxd", "gateway") {
		a, err := gw.addr(8080)
		require.NoError(t, err)
		res, err := http.Get("http://" + a + "/readyz")
		require.NoError(t, err)
		var ready struct{ Checks map[string]string }
		require.NoError(t, json.NewDecoder(res.Body).Decode(&ready))
		res.Body.Close()
		require.Equal(t, "ok", ready.Checks["postgres_2"], "%s reads postgres-2: %v", gw.name, ready.Checks)
	}
	for _, fo := range byCommand(tp, "inboxd", "fanout") {
		logf("%s serves server %s", fo.name, cmp.Or(fo.svc.Environment["INBOXD_SHARD_SERVER"], "1"))
	}
}
