package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/notifier"
)

func TestNotificationLine(t *testing.T) {
	n := notifier.Webhook{UserID: 2, ConversationID: 4, Seq: 17, FirstSeq: 15, Count: 3, SenderID: 7,
		Preview: `say "hi"`, Badge: 5, Reason: notifier.ReasonMention}
	require.Equal(t, `-> user 2: conv 4 #17 (3 messages) from user 7: "say \"hi\"" badge 5 [mention]`, notificationLine(n))
	n.Count, n.Reason, n.Preview = 1, notifier.ReasonMessage, "hi"
	require.Equal(t, `-> user 2: conv 4 #17 from user 7: "hi" badge 5`, notificationLine(n))
}

// postDevNotification delivers n to dev's receiver as its notifier does,
// signed with secret; it returns the status.
func postDevNotification(t *testing.T, base string, secret string, n notifier.Webhook) int {
	t.Helper()
	body, err := json.Marshal(n)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, base+app.DevWebhookPath, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(notifier.HeaderIdempotency, n.ID)
	req.Header.Set(notifier.HeaderSignature, notifier.Sign([]byte(secret), time.Now(), body))
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}

// `inboxd dev` serves its webhook receiver: deliveries signed with the dev
// secret are listed (once per id) at GET /v1/dev/notifications and printed
// by `inboxd tail --notifications`, once or as they come.
func TestDevNotificationsTail(t *testing.T) {
	d := newDevInstance(t)
	d.start(t)
	base := d.url()
	n := notifier.Webhook{ID: "0b6f6f53-2a57-4a43-9b43-9d1b3e0c0a01", UserID: 2, ConversationID: 4, Seq: 17, FirstSeq: 15,
		Count: 3, InboxSeq: 30, SenderID: 7, Preview: "lunch?", Badge: 5, Mentions: 1, Reason: notifier.ReasonMention,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	require.Equal(t, http.StatusUnauthorized, postDevNotification(t, base, "not-the-dev-secret", n))
	require.Equal(t, http.StatusOK, postDevNotification(t, base, app.DevWebhookSecret, n))
	require.Equal(t, http.StatusOK, postDevNotification(t, base, app.DevWebhookSecret, n), "a retry")

	res, err := http.Get(base + app.DevNotificationsPath + "?after=0")
	require.NoError(t, err)
	var list notifier.DevList
	require.NoError(t, json.NewDecoder(res.Body).Decode(&list))
	res.Body.Close()
	require.Equal(t, int64(1), list.Next)
	require.Len(t, list.Notifications, 1, "kept once")
	require.Equal(t, n, list.Notifications[0].Notification)

	work := t.TempDir()
	tail := func(args ...string) *exec.Cmd {
		cmd := exec.Command(testenv.Binary(t), append([]string{"tail", "--notifications"}, args...)...)
		cmd.Dir = work
		cmd.Env = []string{"HOME=" + work, "XDG_CONFIG_HOME=" + work, "INBOXD_URL=" + base}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "INBOXD_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		return cmd
	}
	out, err := tail("--once").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, `-> user 2: conv 4 #17 (3 messages) from user 7: "lunch?" badge 5 [mention]`+"\n", string(out))
	out, err = tail("--once", "--json").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var e notifier.Entry
	require.NoError(t, json.Unmarshal(out, &e), "%s", out)
	require.Equal(t, int64(1), e.N)
	require.Equal(t, n, e.Notification)
	out, err = tail("--once", "--for-user", "3").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, string(out), "only user 3's")

	// Following: what comes later is printed as it comes.
	cmd := tail("--for-user", "3")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	n2 := n
	n2.ID, n2.UserID, n2.Count, n2.Reason, n2.Preview = "0b6f6f53-2a57-4a43-9b43-9d1b3e0c0a02", 3, 1, notifier.ReasonMessage, "ok"
	require.Equal(t, http.StatusOK, postDevNotification(t, base, app.DevWebhookSecret, n2))
	select {
	case l := <-lines:
		require.Equal(t, `-> user 3: conv 4 #17 from user 7: "ok" badge 5`, l)
	case <-time.After(20 * time.Second):
		t.Fatal("tail --notifications printed nothing in 20 s")
	}
	require.NoError(t, d.proc.Stop(30*time.Second), d.proc.Output())
	require.False(t, strings.Contains(d.proc.Output(), "panic"))
}
