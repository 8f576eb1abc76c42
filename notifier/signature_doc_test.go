package notifier

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The documented signature: it verifies with the algorithm of
// docs/notifications.md, checked by the receiver the document gives (its
// Python block, run as it is), not by Go code of ours.

const docReceiverMarker = "# inboxd example receiver"

// docReceiver writes the marked ```python block of docs/notifications.md
// to dir/receiver.py.
func docReceiver(t *testing.T, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "notifications.md"))
	require.NoError(t, err)
	var blocks []string
	for _, part := range strings.Split(string(raw), "```python\n")[1:] {
		code, _, ok := strings.Cut(part, "\n```")
		require.True(t, ok, "a ```python block is closed")
		if strings.HasPrefix(code, docReceiverMarker) {
			blocks = append(blocks, code+"\n")
		}
	}
	require.Len(t, blocks, 1, "one ```python block starts with %q", docReceiverMarker)
	path := filepath.Join(dir, "receiver.py")
	require.NoError(t, os.WriteFile(path, []byte(blocks[0]), 0o644))
	return path
}

func python(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the documented receiver cannot run")
	}
	return py
}

// The worked example of the document is what Sign makes.
func TestSignatureDocExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "docs", "notifications.md"))
	require.NoError(t, err)
	want := Sign([]byte("s3cret"), time.Unix(1764573101, 0), []byte(`{"id":"x"}`))
	require.Contains(t, string(raw), "```\n"+want+"\n```", "docs/notifications.md shows Sign's header for its example")
}

// verifyCase is one call of the documented verify.
type verifyCase struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
	Header string `json:"header"`
	Body   string `json:"body"`
	Now    int64  `json:"now"`
	Want   bool   `json:"want"`
}

const verifyDriver = `import json, sys
sys.path.insert(0, sys.argv[1])
from receiver import verify
out = []
for c in json.load(sys.stdin):
    got = verify(c["secret"].encode(), c["header"], c["body"].encode(), c["now"], 300)
    if not isinstance(got, bool):
        sys.exit("verify returned %r, not a bool" % (got,))
    out.append(got)
json.dump(out, sys.stdout)
`

func TestSignatureVerifiesWithTheDocumentedCode(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	docReceiver(t, dir)

	secret := []byte("whsec-7f1c")
	at := time.Unix(1764573101, 0)
	body, err := json.Marshal(Webhook{ID: "0b6f6f53-2a57-4a43-9b43-9d1b3e0c0a01", UserID: 2, ConversationID: 4, Seq: 17,
		FirstSeq: 15, Count: 3, InboxSeq: 230, SenderID: 7, Preview: "lunch at 1? – ünïcødé \u2028", Badge: 5, Mentions: 1,
		Reason: ReasonMention, CreatedAt: at.UTC()})
	require.NoError(t, err)
	sig := Sign(secret, at, body)
	_, mac, _ := strings.Cut(sig, ",v1=")
	changed := bytes.Replace(body, []byte(`"badge":5`), []byte(`"badge":6`), 1)
	require.NotEqual(t, body, changed)
	now := at.Unix() + 30
	cases := []verifyCase{
		{"valid", string(secret), sig, string(body), now, true},
		{"valid, clock behind", string(secret), sig, string(body), at.Unix() - 299, true},
		{"valid, second v1 (rotation)", string(secret), Sign([]byte("old"), at, body) + ",v1=" + mac, string(body), now, true},
		{"valid, spaces after commas", string(secret), strings.ReplaceAll(sig, ",", ", "), string(body), now, true},
		{"changed body", string(secret), sig, string(changed), now, false},
		{"body with a trailing newline", string(secret), sig, string(body) + "\n", now, false},
		{"wrong secret", "whsec-7f1d", sig, string(body), now, false},
		{"old timestamp", string(secret), sig, string(body), at.Unix() + 301, false},
		{"future timestamp", string(secret), sig, string(body), at.Unix() - 301, false},
		{"timestamp changed", string(secret), strings.Replace(sig, "t=1764573101", "t=1764573102", 1), string(body), now, false},
		{"empty header", string(secret), "", string(body), now, false},
		{"no timestamp", string(secret), "v1=" + mac, string(body), now, false},
		{"no signature", string(secret), "t=1764573101", string(body), now, false},
		{"garbage", string(secret), "garbage", string(body), now, false},
		{"timestamp not a number", string(secret), "t=abc,v1=" + mac, string(body), now, false},
		{"negative timestamp", string(secret), "t=-1764573101,v1=" + mac, string(body), now, false},
		{"signature not hex", string(secret), "t=1764573101,v1=zz" + mac[2:], string(body), now, false},
		{"signature upper case", string(secret), "t=1764573101,v1=" + strings.ToUpper(mac), string(body), now, false},
		{"signature cut", string(secret), "t=1764573101,v1=" + mac[:63], string(body), now, false},
		{"non-ASCII in the header", string(secret), "t=1764573101,v1=é" + mac[1:], string(body), now, false},
		{"v0 only", string(secret), "t=1764573101,v0=" + mac, string(body), now, false},
	}
	in, err := json.Marshal(cases)
	require.NoError(t, err)
	cmd := exec.Command(py, "-c", verifyDriver, dir)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "python: %s", stderr.String())
	var got []bool
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	require.Len(t, got, len(cases))
	for i, c := range cases {
		require.Equal(t, c.Want, got[i], "%s: verify(%q) with the documented code", c.Name, c.Header)
	}
}

// fakeFCM stands in for FCM HTTP v1: it records the messages and answers
// the statuses queued in fail first (then 200).
type fakeFCM struct {
	mu       sync.Mutex
	messages []map[string]any
	auth     []string
	fail     []int
}

func (f *fakeFCM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/projects/demo-project/messages:send" {
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	if len(f.fail) > 0 {
		code := f.fail[0]
		f.fail = f.fail[1:]
		w.Header().Set("Retry-After", "7")
		http.Error(w, `{"error":{"status":"UNAVAILABLE"}}`, code)
		return
	}
	var m map[string]any
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.messages = append(f.messages, m)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	_, _ = w.Write([]byte(`{"name":"projects/demo-project/messages/1"}`))
}

func (f *fakeFCM) sent() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.messages...)
}

// TestDocumentedReceiverForwardsToFCM runs the documented receiver as a
// server against a stand-in FCM: a signed notification becomes one FCM
// message per device token; a bad signature is 401; FCM's 503 is answered
// 503 with its Retry-After (inboxd retries), and the retry pushes once.
func TestDocumentedReceiverForwardsToFCM(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	script := docReceiver(t, dir)
	fcm := &fakeFCM{}
	fs := httptest.NewServer(fcm)
	t.Cleanup(fs.Close)
	tokens := filepath.Join(dir, "tokens.json")
	require.NoError(t, os.WriteFile(tokens, []byte(`{"2":["tok-a","tok-b"]}`), 0o644))
	secret := "whsec-example"
	env := append(os.Environ(), "INBOXD_WEBHOOK_SECRET="+secret, "FCM_PROJECT=demo-project", "FCM_ACCESS_TOKEN=ya29.test",
		"FCM_ENDPOINT="+fs.URL, "DEVICE_TOKENS="+tokens)
	port, logs := startDocReceiver(t, py, script, env)
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)

	n := Webhook{Type: TypeMessage, ID: "6d1c0f43-5f0e-4a53-8d8f-0f5b8f7e2a10", UserID: 2, ConversationID: 4, Seq: 17, FirstSeq: 15, Count: 3,
		InboxSeq: 230, SenderID: 7, Preview: "lunch at 1?", Badge: 5, Mentions: 1, Reason: ReasonMention, CreatedAt: time.Now().UTC()}
	body, err := json.Marshal(n)
	require.NoError(t, err)
	post := func(sig string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderIdempotency, n.ID)
		req.Header.Set(HeaderSignature, sig)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res
	}

	require.Equal(t, http.StatusUnauthorized, post(Sign([]byte("wrong"), time.Now(), body)).StatusCode)
	require.Empty(t, fcm.sent())

	fcm.mu.Lock()
	fcm.fail = []int{http.StatusServiceUnavailable}
	fcm.mu.Unlock()
	res := post(Sign([]byte(secret), time.Now(), body))
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%s", logs)
	require.Equal(t, "7", res.Header.Get("Retry-After"))
	require.Empty(t, fcm.sent())

	require.Equal(t, http.StatusOK, post(Sign([]byte(secret), time.Now(), body)).StatusCode, "%s", logs)
	require.Equal(t, http.StatusOK, post(Sign([]byte(secret), time.Now(), body)).StatusCode, "a retry of a delivered id")
	sent := fcm.sent()
	require.Len(t, sent, 2, "one message per token, once: %v", sent)
	for i, token := range []string{"tok-a", "tok-b"} {
		msg := sent[i]["message"].(map[string]any)
		require.Equal(t, token, msg["token"])
		require.Equal(t, map[string]any{"title": "You were mentioned", "body": "3 new messages: lunch at 1?"}, msg["notification"])
		require.Equal(t, map[string]any{"payload": map[string]any{"aps": map[string]any{"badge": float64(5)}}}, msg["apns"])
		require.Equal(t, map[string]any{"id": n.ID, "conversation_id": "4", "seq": "17", "inbox_seq": "230", "reason": "mention"}, msg["data"])
	}
	require.Equal(t, []string{"Bearer ya29.test", "Bearer ya29.test"}, fcm.auth)
}

// startDocReceiver runs the documented receiver on a free port until the
// test ends and returns the port once it listens. A port picked free can be
// taken before the receiver binds it (the machine runs other tests): then
// it tries another.
func startDocReceiver(t *testing.T, py, script string, env []string) (int, *bytes.Buffer) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(py, script)
		cmd.Env = append(env, fmt.Sprintf("PORT=%d", port))
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				if attempt < 5 && strings.Contains(logs.String(), "Address already in use") {
					goto again
				}
				t.Fatalf("the receiver exited: %s", &logs)
			default:
			}
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				c.Close()
				return port, &logs
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the receiver does not listen after 20 s: %s", &logs)
	again:
	}
}
