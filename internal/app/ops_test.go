package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/app"
)

// /readyz of a fanout names a stuck or stopped partition: 503 with the
// error's status and its partitions as detail; 200 ready otherwise.
func TestReadyzReportsPartitions(t *testing.T) {
	var state error
	mux := app.OpsMux(app.NewRegistry(), func(context.Context) error { return state })
	get := func() (int, map[string]any) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		var body map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
		return rec.Code, body
	}
	code, body := get()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready", body["status"])

	state = &fanout.DegradedError{Partitions: []fanout.PartitionFailure{{Partition: 3, Offset: 1234, Attempts: 4,
		Class: "data", FailingFor: 2 * time.Second, FailingSeconds: 2, Error: "check violation"}}}
	code, body = get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "degraded", body["status"])
	require.Contains(t, body["error"], "partition 3")
	p := body["detail"].(map[string]any)["partitions"].([]any)[0].(map[string]any)
	require.EqualValues(t, 3, p["partition"])
	require.EqualValues(t, 1234, p["offset"])

	state = &fanout.StoppedError{Partitions: []fanout.PartitionStop{{Partition: 1, Reason: fanout.StopTopicRecreated, Detail: "new id"}}}
	code, body = get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "stopped", body["status"])
	require.Equal(t, fanout.StopTopicRecreated, body["detail"].(map[string]any)["partitions"].([]any)[0].(map[string]any)["reason"])
}
