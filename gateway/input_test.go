package gateway

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/auth"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// notText are JSON string literals that are not storable text: NUL, lone
// surrogates in every position, and (as raw bytes) invalid UTF-8, an
// encoded surrogate and a truncated sequence.
var notText = []string{
	`"nul \u0000 byte"`,
	`"\u0000"`,
	`"lone high \ud800"`,
	`"lone low \udc00 here"`,
	`"\uDBFF"`,
	`"high then letter \ud83d\u0041"`,
	`"reversed pair \ude00\ud83d"`,
	"\"bad \xff byte\"",
	"\"encoded surrogate \xed\xa0\x80\"",
	"\"truncated \xc3\"",
}

// TestNotTextRefusedEverywhere: only storable text gets in. NUL, invalid
// UTF-8 and lone surrogates in every text field (message body, msg_id,
// Idempotency-Key, title, unknown fields, query values, paths), over HTTP
// and the WebSocket, are refused with 400 or an error frame; nothing is
// appended (the log's end offsets and the projections are unchanged); a
// message sent right after by another user is projected.
func TestNotTextRefusedEverywhere(t *testing.T) {
	w := newWSGateway(t, nil, WSConfig{HeartbeatInterval: 5 * time.Second})
	a, b := w.user(t, 1), w.user(t, 2)
	cid := a.create(t, "c", 2)
	a.send(t, cid, "hello")
	w.env.WaitCaughtUp(t, 30*time.Second)
	before := w.snapshot(t)

	msgs := fmt.Sprintf("/v1/conversations/%d/messages", cid)
	conv := fmt.Sprintf("/v1/conversations/%d", cid)
	for _, s := range notText {
		u := uuid.NewString()
		for _, c := range []struct {
			method, path, body string
			hdr                []string
		}{
			{"POST", msgs, `{"msg_id":"` + u + `","body":` + s + `}`, nil},
			{"POST", msgs, `{"msg_id":` + s + `,"body":"x"}`, nil},
			{"POST", msgs, `{"body":"x"}`, []string{"Idempotency-Key", strings.Trim(s, `"`)}},
			{"POST", msgs, `{"msg_id":"` + u + `","body":"x"}`, []string{"Idempotency-Key", strings.Trim(s, `"`)}},
			{"POST", msgs, `{"msg_id":"` + u + `","body":"x","note":` + s + `}`, nil},
			{"POST", "/v1/conversations", `{"title":` + s + `,"members":[2]}`, nil},
			{"POST", "/v1/conversations", `{"title":"ok",` + s + `:1}`, nil},
			{"POST", conv + "/members", `{"user_id":` + s + `}`, nil},
			{"PATCH", conv + "/record", `{"pinned":true,"label":` + s + `}`, nil},
			{"POST", conv + "/read", `{"seq":1,"why":` + s + `}`, nil},
		} {
			if c.hdr != nil && strings.ContainsAny(c.hdr[1], "\\") {
				continue // a JSON escape is no header text; raw bytes are tried
			}
			r := a.do(t, c.method, c.path, []byte(c.body), c.hdr...)
			requireError(t, r, http.StatusBadRequest, protocol.CodeBadRequest, fmt.Sprintf("%s %s %q %q", c.method, c.path, c.body, c.hdr))
		}
		// A msg_id that is a uuid but for its last character.
		r := a.do(t, "POST", msgs, []byte(`{"msg_id":"`+u[:35]+strings.Trim(s, `"`)+`","body":"x"}`))
		requireError(t, r, http.StatusBadRequest, protocol.CodeBadRequest, "msg_id "+s)
	}
	// Query values and path ids: percent-encoded NUL and invalid UTF-8.
	for _, path := range []string{"/v1/sync?after=%00", "/v1/sync?epoch=%ff", "/v1/conversations?page=%00",
		"/v1/conversations?page=%ff%fe", "/v1/conversations/%00/messages", msgs + "?before=%ed%a0%80"} {
		requireError(t, a.do(t, "GET", path, nil), http.StatusBadRequest, protocol.CodeBadRequest, path)
	}
	// A NUL in a header value never reaches a handler: net/http refuses it.
	status := rawStatus(t, w.url, "POST "+msgs+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+a.token+
		"\r\nIdempotency-Key: "+uuid.NewString()[:35]+"\x00\r\nContent-Length: 12\r\n\r\n{\"body\":\"x\"}")
	require.Equal(t, http.StatusBadRequest, status)

	// The WebSocket: every bad send gets an error frame, the connection
	// stays open, and a valid send afterwards is acknowledged.
	c := dialWS(t, w, a)
	c.hello(t, a.head(t), nil)
	require.Equal(t, protocol.FrameWelcome, c.next(t).Type)
	for _, s := range notText {
		u := uuid.NewString()
		raw := !strings.Contains(s, `\u`) // invalid UTF-8: the frame cannot be read at all
		for _, tc := range []struct {
			frame string
			msgID string // the error names the send when its id could be read
		}{
			{fmt.Sprintf(`{"type":"send","conversation_id":%d,"msg_id":"%s","body":%s}`, cid, u, s), u},
			{fmt.Sprintf(`{"type":"send","conversation_id":%d,"msg_id":%s,"body":"x"}`, cid, s), ""},
			{fmt.Sprintf(`{"type":"send","conversation_id":%d,"msg_id":"%s","body":"x","note":%s}`, cid, u, s), u},
			{fmt.Sprintf(`{"type":"ping","note":%s}`, s), ""},
		} {
			require.NoError(t, c.conn.WriteMessage(websocket.TextMessage, []byte(tc.frame)))
			f := c.nextOf(t)
			require.Equal(t, protocol.FrameError, f.Type, tc.frame)
			require.Equal(t, protocol.CodeBadRequest, f.Code, "%s: %s", tc.frame, f.Message)
			if !raw {
				require.Equal(t, tc.msgID, f.MsgID, tc.frame)
			}
		}
	}
	// A hello with such a string closes, as any bad hello.
	for _, s := range notText[:3] {
		h := dialWS(t, w, b)
		require.NoError(t, h.conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"hello","after":0,"note":`+s+`}`)))
		code, frames := h.closeCode(t)
		require.Equal(t, protocol.CloseProtocol, code, s)
		require.Len(t, frames, 1, s)
		require.Equal(t, protocol.CodeBadRequest, frames[0].Code, s)
	}

	w.env.WaitCaughtUp(t, 30*time.Second)
	require.Equal(t, before, w.snapshot(t), "refused input changed the log or the projections")

	// The pipeline goes on: another user's message right after is
	// projected (201 with a seq), over HTTP and over the socket.
	m := b.send(t, cid, "right after")
	require.Positive(t, m.Seq)
	id := uuid.NewString()
	c.writeJSON(t, map[string]any{"type": protocol.FrameSend, "conversation_id": cid, "msg_id": id, "body": "over ws after"})
	for {
		f := c.nextOf(t)
		if f.Type == protocol.FrameSendAck {
			require.Equal(t, id, f.MsgID)
			require.Equal(t, m.Seq+1, f.Seq)
			break
		}
		require.NotEqual(t, protocol.FrameError, f.Type, "%+v", f)
	}
	// U+FFFD is text: accepted, and stored as sent.
	r := a.do(t, "POST", msgs, []byte(`{"msg_id":"`+uuid.NewString()+`","body":"replacement \ufffd char"}`))
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	var got protocol.Message
	r.decode(t, &got)
	require.Equal(t, "replacement \uFFFD char", msgText(t, got))
	w.verify(t)
}

// rawStatus sends req as is on a new connection to the server at base and
// returns the answer's status.
func rawStatus(t testing.TB, base, req string) int {
	t.Helper()
	res, _ := rawRequest(t, base, req)
	return res.StatusCode
}

// rawRequest sends req as is and reads one answer.
func rawRequest(t testing.TB, base, req string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 10*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = conn.Write([]byte(req))
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer res.Body.Close()
	var body strings.Builder
	_, _ = bufio.NewReader(res.Body).WriteTo(&body)
	return res, []byte(body.String())
}

// TestSendTakenMsgIDMembershipFirst: a non-member sending with an existing
// msg_id (another user's message) gets 403, exactly as with a fresh one, so
// existence does not leak; a member gets 400; the sender's own retry gets
// 200 with the original, also after it has left.
func TestSendTakenMsgIDMembershipFirst(t *testing.T) {
	tg := newGateway(t, nil)
	a, b, outsider := tg.user(t, 1), tg.user(t, 2), tg.user(t, 3)
	cid := a.create(t, "c", 2)
	m := a.send(t, cid, "mine")
	msgs := fmt.Sprintf("/v1/conversations/%d/messages", cid)

	taken := outsider.do(t, "POST", msgs, map[string]any{"msg_id": m.MsgID, "body": "x"})
	requireError(t, taken, http.StatusForbidden, protocol.CodeNotMember, "outsider with a's msg_id")
	fresh := outsider.do(t, "POST", msgs, map[string]any{"msg_id": uuid.NewString(), "body": "x"})
	requireError(t, fresh, http.StatusForbidden, protocol.CodeNotMember, "outsider with a fresh msg_id")
	var e1, e2 protocol.ErrorBody
	taken.decode(t, &e1)
	fresh.decode(t, &e2)
	require.Equal(t, e2.Error.Message, e1.Error.Message, "the answers must not differ")
	r := outsider.do(t, "POST", msgs, `{"body":"x"}`, "Idempotency-Key", m.MsgID)
	requireError(t, r, http.StatusForbidden, protocol.CodeNotMember, "outsider with a's msg_id as Idempotency-Key")
	// Another conversation of the outsider: the id is taken there, and
	// that is the outsider's own business now.
	own := outsider.create(t, "own")
	r = outsider.do(t, "POST", fmt.Sprintf("/v1/conversations/%d/messages", own), map[string]any{"msg_id": m.MsgID, "body": "x"})
	requireError(t, r, http.StatusBadRequest, protocol.CodeBadRequest, "outsider's own conversation")

	r = b.do(t, "POST", msgs, map[string]any{"msg_id": m.MsgID, "body": "x"})
	requireError(t, r, http.StatusBadRequest, protocol.CodeBadRequest, "member with a's msg_id")

	r = a.do(t, "POST", msgs, map[string]any{"msg_id": m.MsgID, "body": "ignored"})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, http.StatusAccepted, a.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/1", cid), nil).status)
	r = a.do(t, "POST", msgs, map[string]any{"msg_id": m.MsgID, "body": "ignored"})
	require.Equal(t, http.StatusOK, r.status, "own retry after leaving: %s", r)
	var back protocol.Message
	r.decode(t, &back)
	require.Equal(t, m.Seq, back.Seq)
	require.Equal(t, "mine", msgText(t, back))
	// Having left, a is an outsider for b's msg_ids.
	mb := b.send(t, cid, "b's")
	r = a.do(t, "POST", msgs, map[string]any{"msg_id": mb.MsgID, "body": "x"})
	requireError(t, r, http.StatusForbidden, protocol.CodeNotMember, "a, gone, with b's msg_id")
}

// TestSendDeadLettered: a send whose event the projection dead-letters
// answers 400 (not 403) saying it will not be delivered, to the waiting
// sender and to every retry of its msg_id, which appends nothing. The
// fanout is stopped after the setup, and the dead_letter rejection is
// written as the fanout would write it.
func TestSendDeadLettered(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	stopFanout := env.StartFanout(t)
	// A long ack wait: the waiting sender must be answered by the
	// rejection's notification, not by the end of the wait.
	g, err := NewOn(wsTestConfig(env, func(c *Config) { c.AckWait = 20 * time.Second }), placementOf(env), env.Producer)
	require.NoError(t, err)
	startListen(t, g)
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() {
		g.Drain()
		srv.Close()
	})
	tg := &tgw{env: env, g: g, srv: srv, url: srv.URL,
		hc: &http.Client{Timeout: 90 * time.Second}}
	a, b := tg.user(t, 1), tg.user(t, 2)
	cid := a.create(t, "c", 2)
	a.send(t, cid, "projected")
	env.WaitCaughtUp(t, 30*time.Second)
	stopFanout()

	ctx := context.Background()
	insertDeadLetter := func(eventID, msgID string, actor int64) {
		_, err := env.ConvPool(cid).Exec(ctx, `INSERT INTO rejections (event_id, msg_id, event_type, conversation_id, actor_id,
			reason, topic, "partition", "offset", rejected_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 0, now())`,
			eventID, msgID, events.MessageSent, cid, actor, projection.ReasonDeadLetter, env.Topic)
		require.NoError(t, err)
		// And its notification, as the fanout sends it at the commit.
		var enc projection.Encoder
		enc.Rejected(msgID)
		for _, pl := range enc.Payloads() {
			_, err = env.ConvPool(cid).Exec(ctx, `SELECT pg_notify($1, $2)`, projection.DefaultChannel, pl)
			require.NoError(t, err)
		}
	}
	msgs := fmt.Sprintf("/v1/conversations/%d/messages", cid)

	// The waiting sender: its event is appended, then dead-lettered.
	id := uuid.NewString()
	answer := make(chan resp, 1)
	go func() {
		r, err := a.doE("POST", msgs, map[string]any{"msg_id": id, "body": "poison"})
		if err != nil {
			r = resp{status: -1, body: []byte(err.Error())}
		}
		answer <- r
	}()
	eventID := findEventID(t, env, id)
	insertDeadLetter(eventID, id, a.id)
	r := <-answer
	requireError(t, r, http.StatusBadRequest, protocol.CodeBadRequest, "waiting sender")
	require.Contains(t, string(r.body), "will not be delivered")
	var e protocol.ErrorBody
	r.decode(t, &e)
	require.False(t, e.Error.Retryable)

	// Retries answer the same, append nothing, also after leaving.
	idB := uuid.NewString()
	insertDeadLetter(uuid.NewString(), idB, b.id)
	_, err = env.ConvPool(cid).Exec(ctx, `UPDATE member_spans SET left_seq = 2 WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL`, cid, b.id)
	require.NoError(t, err)
	env.Poked()
	logBefore := tg.snapshot(t)
	r = a.do(t, "POST", msgs, map[string]any{"msg_id": id, "body": "poison"})
	requireError(t, r, http.StatusBadRequest, protocol.CodeBadRequest, "retry")
	require.Contains(t, string(r.body), "will not be delivered")
	r = a.do(t, "POST", msgs, `{"body":"poison"}`, "Idempotency-Key", strings.ToUpper(id))
	requireError(t, r, http.StatusBadRequest, protocol.CodeBadRequest, "retry by Idempotency-Key")
	// b's dead-lettered msg_id, b no longer a member: still the 400.
	r = b.do(t, "POST", msgs, map[string]any{"msg_id": idB, "body": "again"})
	requireError(t, r, http.StatusBadRequest, protocol.CodeBadRequest, "retry after leaving")
	require.Equal(t, logBefore, tg.snapshot(t), "a retry of a dead-lettered msg_id appended")
}

// findEventID reads the topic until the message.sent of msgID appears and
// returns its event id.
func findEventID(t testing.TB, env *testenv.Env, msgID string) string {
	t.Helper()
	var found string
	readLog(t, env, "message "+msgID, func(e *events.Event) bool {
		if e.MsgID == msgID {
			found = e.EventID
		}
		return found != ""
	})
	return found
}

// readLog hands the topic's events, from its start, to each until it
// returns true; the test fails (naming what) if that takes over 30 s.
func readLog(t testing.TB, env *testenv.Env, what string, each func(*events.Event) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(env.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "%s not in the log", what)
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if e, err := events.Decode(r.Value, 0); err == nil && !done {
				done = each(e)
			}
		})
		if done {
			return
		}
	}
}

// token signs header and claims, given as raw JSON, with the test secret.
func rawToken(header, claims string) string {
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	mac := hmac.New(sha256.New, testSecret)
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

// strictTokens are well signed tokens that must be refused: a string exp,
// duplicate claims, a duplicate header member. good is one that must pass.
func strictTokens() (bad map[string]string, good string) {
	const h = `{"alg":"HS256","typ":"JWT"}`
	exp := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	return map[string]string{
		"exp string":     rawToken(h, `{"sub":"1","exp":"`+exp+`"}`),
		"iat string":     rawToken(h, `{"sub":"1","exp":`+exp+`,"iat":"1"}`),
		"two sub":        rawToken(h, `{"sub":"1","exp":`+exp+`,"sub":"2"}`),
		"two exp":        rawToken(h, `{"sub":"1","exp":1,"exp":`+exp+`}`),
		"sub and SUB":    rawToken(h, `{"sub":"1","exp":`+exp+`,"SUB":"2"}`),
		"two alg":        rawToken(`{"alg":"none","alg":"HS256","typ":"JWT"}`, `{"sub":"1","exp":`+exp+`}`),
		"same exp twice": rawToken(h, `{"sub":"1","exp":`+exp+`,"exp":`+exp+`}`),
	}, rawToken(h, `{"sub":"1","exp":`+exp+`,"extra":{"exp":"x","sub":1}}`)
}

// TestTokenStrictClaims: exp must be a JSON number and no claim (or header
// member) may be given twice; the same token without the fault passes.
func TestTokenStrictClaims(t *testing.T) {
	bad, good := strictTokens()
	u, err := verifyToken(testSecret, good)
	require.NoError(t, err)
	require.Equal(t, int64(1), u)
	for name, tok := range bad {
		_, err := verifyToken(testSecret, tok)
		require.Error(t, err, name)
	}
	// Over HTTP: 401 in the error shape.
	tg := newGateway(t, nil)
	require.Equal(t, http.StatusOK, (&user{tg: tg, token: good}).do(t, "GET", "/v1/sync", nil).status)
	for name, tok := range bad {
		r := (&user{tg: tg, token: tok}).do(t, "GET", "/v1/sync", nil)
		requireError(t, r, http.StatusUnauthorized, protocol.CodeUnauthorized, name)
	}
}

// TestHeaderTooLarge: a request header over MaxHeaderBytes answers 431 in
// the error shape, whether the handler sees it or net/http refuses to read
// it all; a header net/http cannot take (a NUL) is a 400 in the error
// shape; a header under the limit is served.
func TestHeaderTooLarge(t *testing.T) {
	tg := buildGateway(t, nil)
	tg.serve(t)
	u := tg.user(t, 1)
	req := func(extra string) string {
		return "GET /v1/sync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + u.token + "\r\n" + extra + "\r\n"
	}
	res, _ := rawRequest(t, tg.url, req("X-Pad: "+strings.Repeat("a", 60<<10)+"\r\n"))
	require.Equal(t, http.StatusOK, res.StatusCode)
	for _, size := range []int{65 << 10, 100 << 10, 300 << 10} {
		res, body := rawRequest(t, tg.url, req("X-Pad: "+strings.Repeat("a", size)+"\r\n"))
		requireError(t, resp{status: res.StatusCode, header: res.Header, body: body},
			http.StatusRequestHeaderFieldsTooLarge, protocol.CodeHeaderTooLarge, fmt.Sprintf("header of %d bytes", size))
	}
	// Many small fields count too.
	var many strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&many, "X-F%d: %s\r\n", i, strings.Repeat("b", 30))
	}
	res, body := rawRequest(t, tg.url, req(many.String()))
	requireError(t, resp{status: res.StatusCode, header: res.Header, body: body},
		http.StatusRequestHeaderFieldsTooLarge, protocol.CodeHeaderTooLarge, "many fields")
	res, body = rawRequest(t, tg.url, req("X-Nul: a\x00b\r\n"))
	requireError(t, resp{status: res.StatusCode, header: res.Header, body: body},
		http.StatusBadRequest, protocol.CodeBadRequest, "NUL in a header")
}

// TestRewritePlainError pins the form of net/http's own error answers that
// jsonErrorListener replaces, and that nothing else is touched.
func TestRewritePlainError(t *testing.T) {
	plain := func(line string) []byte { return []byte("HTTP/1.1 " + line + plainHeaders + line) }
	for line, code := range map[string]int{
		"431 Request Header Fields Too Large":   431,
		"400 Bad Request":                       400,
		"400 Bad Request: invalid header value": 400,
	} {
		out := rewritePlainError(plain(line))
		require.NotNil(t, out, line)
		res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(out))), nil)
		require.NoError(t, err)
		require.Equal(t, code, res.StatusCode)
		require.Contains(t, res.Header.Get("Content-Type"), "application/json")
	}
	for _, b := range [][]byte{
		[]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"),
		plain("501 Not Implemented"),
		[]byte("HTTP/1.1 400 Bad Request" + plainHeaders + "something else"),
	} {
		require.Nil(t, rewritePlainError(b), "%q", b)
	}
}

// verifyToken verifies raw as a gateway with only the HS256 secret does.
func verifyToken(secret []byte, raw string) (int64, error) {
	v, err := auth.New(auth.Config{Secret: secret})
	if err != nil {
		return 0, err
	}
	tk, err := v.Verify(context.Background(), raw)
	u := tk.User
	return u, err
}
