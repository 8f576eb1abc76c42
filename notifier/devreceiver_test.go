package notifier

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func devPost(t *testing.T, d *DevReceiver, secret []byte, at time.Time, body []byte, sig string) int {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/dev/notifications", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if sig == "" {
		sig = Sign(secret, at, body)
	}
	r.Header.Set(HeaderSignature, sig)
	w := httptest.NewRecorder()
	d.ServeHTTP(w, r)
	return w.Code
}

func devList(t *testing.T, d *DevReceiver, query string) (DevList, int) {
	t.Helper()
	w := httptest.NewRecorder()
	d.ListHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/dev/notifications?"+query, nil))
	var l DevList
	if w.Code == http.StatusOK {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &l), w.Body.String())
	}
	return l, w.Code
}

func devNotification(id string, user int64) []byte {
	b, _ := json.Marshal(Webhook{ID: id, UserID: user, ConversationID: 4, Seq: 17, FirstSeq: 15, Count: 3,
		SenderID: 7, Preview: "hi", Badge: 5, Reason: ReasonMessage, CreatedAt: time.Unix(1700000000, 0).UTC()})
	return b
}

// TestDevReceiver: signed deliveries are kept once per id, numbered, listed
// after a number and by user; a bad signature, an old timestamp or a body
// that is no notification is refused and not kept; the oldest go beyond
// the limit.
func TestDevReceiver(t *testing.T) {
	secret := []byte("dev-secret")
	d := NewDevReceiver(secret, 3)
	now := time.Now()

	require.Equal(t, http.StatusOK, devPost(t, d, secret, now, devNotification("a", 2), ""))
	require.Equal(t, http.StatusOK, devPost(t, d, secret, now, devNotification("a", 2), ""), "a retry is answered 200")
	require.Equal(t, http.StatusOK, devPost(t, d, secret, now, devNotification("b", 3), ""))

	body := devNotification("c", 2)
	require.Equal(t, http.StatusUnauthorized, devPost(t, d, []byte("other"), now, body, ""), "wrong secret")
	require.Equal(t, http.StatusUnauthorized, devPost(t, d, secret, now.Add(-time.Hour), body, ""), "too old")
	require.Equal(t, http.StatusUnauthorized, devPost(t, d, secret, now, body, "v1=00"), "no timestamp")
	require.Equal(t, http.StatusUnauthorized, devPost(t, d, secret, now, body, "garbage"), "malformed")
	changed := append(bytes.Clone(body[:len(body)-1]), ' ', '}')
	require.Equal(t, http.StatusUnauthorized, devPost(t, d, secret, now, changed, Sign(secret, now, body)), "changed body")
	require.Equal(t, http.StatusBadRequest, devPost(t, d, secret, now, []byte(`{"id":"x"}`), ""), "no user")
	require.Equal(t, http.StatusBadRequest, devPost(t, d, secret, now, []byte(`[]`), ""))
	// Another v1 beside the right one (a rotated secret) is fine.
	two := Sign(secret, now, body) + ",v1=" + fmt.Sprintf("%064x", 1)
	require.Equal(t, http.StatusOK, devPost(t, d, secret, now, body, two))

	l, code := devList(t, d, "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, int64(3), l.Next)
	require.Len(t, l.Notifications, 3)
	require.Equal(t, []int64{1, 2, 3}, []int64{l.Notifications[0].N, l.Notifications[1].N, l.Notifications[2].N})
	require.Equal(t, "a", l.Notifications[0].Notification.ID)
	require.Equal(t, 3, l.Notifications[0].Notification.Count)
	require.False(t, l.Notifications[0].ReceivedAt.IsZero())

	l, _ = devList(t, d, "after=1&user_id=2")
	require.Len(t, l.Notifications, 1)
	require.Equal(t, "c", l.Notifications[0].Notification.ID)
	require.Equal(t, int64(3), l.Next)
	l, _ = devList(t, d, "after=3")
	require.Empty(t, l.Notifications)
	require.Equal(t, int64(3), l.Next)
	raw := httptest.NewRecorder()
	d.ListHandler().ServeHTTP(raw, httptest.NewRequest(http.MethodGet, "/?after=3", nil))
	require.JSONEq(t, `{"notifications":[],"next":3}`, raw.Body.String(), "an empty list, not null")

	require.Equal(t, http.StatusOK, devPost(t, d, secret, now, devNotification("d", 2), ""))
	l, _ = devList(t, d, "")
	require.Len(t, l.Notifications, 3, "keeps the last 3")
	require.Equal(t, int64(2), l.Notifications[0].N)
	require.Equal(t, http.StatusOK, devPost(t, d, secret, now, devNotification("a", 2), ""))
	require.Equal(t, int64(5), d.Last(), "an id no longer kept is kept again")

	l, _ = devList(t, d, "after=99")
	require.Len(t, l.Notifications, 3, "a number from before a restart lists everything")
	require.Equal(t, int64(5), l.Next)
	for _, q := range []string{"after=x", "after=-1", "user_id=1.5"} {
		_, code := devList(t, d, q)
		require.Equal(t, http.StatusBadRequest, code, q)
	}
}
