package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/protocol"
)

// snapshot summarises every projection and the log's end offsets.
func (tg *tgw) snapshot(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	var counts [9]int64
	for _, pool := range tg.env.Pools {
		var c [9]int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM messages), (SELECT count(*) FROM inbox), (SELECT count(*) FROM records),
		(SELECT COALESCE(sum(version), 0) FROM records), (SELECT count(*) FROM member_spans),
		(SELECT count(*) FROM member_spans WHERE left_seq IS NULL), (SELECT count(*) FROM conversations),
		(SELECT COALESCE(sum(inbox_seq), 0) FROM users), (SELECT count(*) FROM rejections)`).Scan(
			&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &c[8]))
		for i := range c {
			counts[i] += c[i]
		}
	}
	require.NoError(t, tg.env.Producer.Flush(ctx))
	ends, err := kadm.NewClient(tg.env.Producer.Client()).ListEndOffsets(ctx, tg.env.Topic)
	require.NoError(t, err)
	var end int64
	ends.Each(func(o kadm.ListedOffset) { end += o.Offset })
	return fmt.Sprintf("%v log=%d", counts, end)
}

func signed(t testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	require.NoError(t, err)
	return s
}

// requireError checks the error shape of r.
func requireError(t testing.TB, r resp, status int, code, what string) {
	t.Helper()
	require.Equal(t, status, r.status, "%s: %s", what, r)
	var shape map[string]map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(r.body, &shape), "%s: %s", what, r)
	require.Len(t, shape, 1, what)
	e := shape["error"]
	require.ElementsMatch(t, []string{"code", "message", "retryable"}, slices.Collect(maps.Keys(e)), "%s: %s", what, r)
	var got protocol.ErrorBody
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Equal(t, code, got.Error.Code, "%s: %s", what, r)
	require.NotEmpty(t, got.Error.Message, what)
	require.Contains(t, r.header.Get("Content-Type"), "application/json", what)
}

// TestBadInput is acceptance 6: every kind of bad request gets the error
// shape and changes nothing, in the projections or in the log.
func TestBadInput(t *testing.T) {
	tg := newGateway(t, nil)
	a, outsider := tg.user(t, 1), tg.user(t, 3)
	cid := a.create(t, "c", 2)
	a.send(t, cid, "hello")
	tg.env.WaitCaughtUp(t, 30*time.Second)
	before := tg.snapshot(t)

	msgs := fmt.Sprintf("/v1/conversations/%d/messages", cid)
	conv := fmt.Sprintf("/v1/conversations/%d", cid)
	u := uuid.NewString()
	send := func(body string) string { return `{"msg_id":"` + u + `","body":` + body + `}` }
	type tc struct {
		who          *user
		method, path string
		body         any
		hdr          []string
		status       int
		code         string
	}
	bad := func(method, path string, body any, hdr ...string) tc {
		return tc{a, method, path, body, hdr, http.StatusBadRequest, protocol.CodeBadRequest}
	}
	cases := []tc{
		// sends
		bad("POST", msgs, `{"msg_id":`),
		bad("POST", msgs, `{"msg_id":"`+u+`","body":"x","extra":1}`),
		bad("POST", msgs, send(`5`)),
		bad("POST", msgs, `{"msg_id":5,"body":"x"}`),
		bad("POST", msgs, []byte("{\"msg_id\":\""+u+"\",\"body\":\"\xff\xfe\"}")),
		bad("POST", msgs, ``),
		bad("POST", msgs, `   `),
		bad("POST", msgs, `null`),
		bad("POST", msgs, `[]`),
		bad("POST", msgs, `"text"`),
		bad("POST", msgs, send(`""`)),
		bad("POST", msgs, send(`"x"`)+` {}`),
		bad("POST", msgs, `{"msg_id":"not-a-uuid","body":"x"}`),
		bad("POST", msgs, `{"msg_id":"`+strings.ReplaceAll(u, "-", "")+`","body":"x"}`),
		bad("POST", msgs, `{"body":"x"}`),
		bad("POST", msgs, `{"body":"x"}`, "Idempotency-Key", "nope"),
		bad("POST", msgs, send(`"x"`), "Idempotency-Key", uuid.NewString()),
		bad("POST", "/v1/conversations/abc/messages", send(`"x"`)),
		bad("POST", "/v1/conversations/-1/messages", send(`"x"`)),
		bad("POST", "/v1/conversations/0/messages", send(`"x"`)),
		bad("POST", "/v1/conversations/99999999999999999999/messages", send(`"x"`)),
		{a, "POST", msgs, send(`"` + strings.Repeat("é", 2049) + `"`), nil, http.StatusRequestEntityTooLarge, protocol.CodePayloadTooLarge},
		{a, "POST", msgs, send(`"` + strings.Repeat("x", 200<<10) + `"`), nil, http.StatusRequestEntityTooLarge, protocol.CodePayloadTooLarge},
		{a, "POST", "/v1/conversations/999999/messages", send(`"x"`), nil, http.StatusNotFound, protocol.CodeNotFound},
		{outsider, "POST", msgs, send(`"x"`), nil, http.StatusForbidden, protocol.CodeNotMember},
		// create
		bad("POST", "/v1/conversations", `{"title":5}`),
		bad("POST", "/v1/conversations", `{"members":[-1]}`),
		bad("POST", "/v1/conversations", `{"members":[0]}`),
		bad("POST", "/v1/conversations", `{"members":"x"}`),
		bad("POST", "/v1/conversations", `{"members":[1.5]}`),
		bad("POST", "/v1/conversations", `{"title":"`+strings.Repeat("t", 257)+`"}`),
		bad("POST", "/v1/conversations", `{"foo":1}`),
		bad("POST", "/v1/conversations", ``),
		// members
		bad("POST", conv+"/members", `{"user_id":"7"}`),
		bad("POST", conv+"/members", `{"user_id":0}`),
		bad("POST", conv+"/members", `{}`),
		bad("POST", conv+"/members", `{"user_id":7,"role":"admin"}`),
		{outsider, "POST", conv + "/members", `{"user_id":3}`, nil, http.StatusForbidden, protocol.CodeNotMember},
		{a, "POST", "/v1/conversations/999999/members", `{"user_id":3}`, nil, http.StatusNotFound, protocol.CodeNotFound},
		bad("DELETE", conv+"/members/x", nil),
		bad("DELETE", conv+"/members/-2", nil),
		{outsider, "DELETE", conv + "/members/2", nil, nil, http.StatusForbidden, protocol.CodeNotMember},
		{outsider, "DELETE", conv + "/members/3", nil, nil, http.StatusForbidden, protocol.CodeNotMember},
		{a, "DELETE", "/v1/conversations/999999/members/2", nil, nil, http.StatusNotFound, protocol.CodeNotFound},
		// record and read
		bad("PATCH", conv+"/record", `{}`),
		bad("PATCH", conv+"/record", `{"pinned":null}`),
		bad("PATCH", conv+"/record", `{"pinned":"yes"}`),
		bad("PATCH", conv+"/record", `{"pinned":true,"starred":true}`),
		{outsider, "PATCH", conv + "/record", `{"pinned":true}`, nil, http.StatusForbidden, protocol.CodeNotMember},
		{a, "PATCH", "/v1/conversations/999999/record", `{"pinned":true}`, nil, http.StatusNotFound, protocol.CodeNotFound},
		bad("POST", conv+"/read", `{"seq":-1}`),
		bad("POST", conv+"/read", `{}`),
		bad("POST", conv+"/read", `{"seq":1.5}`),
		bad("POST", conv+"/read", `{"seq":"1"}`),
		{outsider, "POST", conv + "/read", `{"seq":1}`, nil, http.StatusForbidden, protocol.CodeNotMember},
		{a, "POST", "/v1/conversations/999999/read", `{"seq":1}`, nil, http.StatusNotFound, protocol.CodeNotFound},
		// history
		{outsider, "GET", msgs, nil, nil, http.StatusForbidden, protocol.CodeNotMember},
		{a, "GET", "/v1/conversations/999999/messages", nil, nil, http.StatusNotFound, protocol.CodeNotFound},
		bad("GET", msgs+"?before=-1", nil),
		bad("GET", msgs+"?before=0", nil),
		bad("GET", msgs+"?before=99999999999999999999", nil),
		bad("GET", msgs+"?limit=0", nil),
		bad("GET", msgs+"?limit=201", nil),
		bad("GET", msgs+"?limit=abc", nil),
		bad("GET", msgs+"?limit=", nil),
		// sync
		bad("GET", "/v1/sync?after=-1", nil),
		bad("GET", "/v1/sync?after=abc", nil),
		bad("GET", "/v1/sync?after=1e3", nil),
		bad("GET", "/v1/sync?after=%2B1", nil),
		bad("GET", "/v1/sync?after=99999999999999999999", nil),
		bad("GET", "/v1/sync?after=1000000", nil),
		bad("GET", "/v1/sync?after=1&after=2", nil),
		bad("GET", "/v1/sync?limit=0", nil),
		bad("GET", "/v1/sync?limit=-5", nil),
		bad("GET", "/v1/sync?limit=1000", nil),
		bad("GET", "/v1/sync?limit=x", nil),
		bad("GET", "/v1/sync?wait=-1", nil),
		bad("GET", "/v1/sync?wait=31", nil),
		bad("GET", "/v1/sync?wait=1.5", nil),
		bad("GET", "/v1/sync?wait=abc", nil),
		bad("GET", "/v1/sync?epoch=abc", nil),
		bad("GET", "/v1/sync?epoch=-1", nil),
		// list
		bad("GET", "/v1/conversations?limit=0", nil),
		bad("GET", "/v1/conversations?limit=999", nil),
		bad("GET", "/v1/conversations?page=garbage", nil),
		bad("GET", "/v1/conversations?page=!!!", nil),
		bad("GET", "/v1/conversations?since_version=-1", nil),
		bad("GET", "/v1/conversations?since_version=x", nil),
		// dev token, routing
		{&user{tg: tg}, "POST", "/v1/dev/token", `{"user_id":-1}`, nil, http.StatusBadRequest, protocol.CodeBadRequest},
		{&user{tg: tg}, "POST", "/v1/dev/token", `{"user":1}`, nil, http.StatusBadRequest, protocol.CodeBadRequest},
		{a, "GET", "/v1/nowhere", nil, nil, http.StatusNotFound, protocol.CodeNotFound},
		{a, "PUT", "/v1/sync", nil, nil, http.StatusMethodNotAllowed, protocol.CodeBadRequest},
	}
	for _, c := range cases {
		what := c.method + " " + c.path
		if b, ok := c.body.(string); ok && len(b) < 120 {
			what += " " + b
		}
		r := c.who.do(t, c.method, c.path, c.body, c.hdr...)
		requireError(t, r, c.status, c.code, what)
	}

	// Tokens, on every authenticated route.
	now := time.Now()
	claims := func(sub any, exp time.Time) jwt.MapClaims {
		return jwt.MapClaims{"sub": sub, "exp": exp.Unix()}
	}
	tokens := map[string]string{
		"missing":     "",
		"expired":     signed(t, jwt.SigningMethodHS256, testSecret, claims("1", now.Add(-time.Minute))),
		"forged":      signed(t, jwt.SigningMethodHS256, []byte("another secret"), claims("1", now.Add(time.Hour))),
		"hs512":       signed(t, jwt.SigningMethodHS512, testSecret, claims("1", now.Add(time.Hour))),
		"none":        signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims("1", now.Add(time.Hour))),
		"no exp":      signed(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "1"}),
		"bad sub":     signed(t, jwt.SigningMethodHS256, testSecret, claims("alice", now.Add(time.Hour))),
		"zero sub":    signed(t, jwt.SigningMethodHS256, testSecret, claims("0", now.Add(time.Hour))),
		"numeric sub": signed(t, jwt.SigningMethodHS256, testSecret, claims(1, now.Add(time.Hour))),
		"garbage":     "not.a.token",
	}
	for name, tok := range tokens {
		for _, rt := range tg.g.routes {
			if !rt.auth {
				continue
			}
			path := strings.NewReplacer("{cid}", fmt.Sprint(cid), "{uid}", "2").Replace(rt.path)
			r := (&user{tg: tg, token: tok}).do(t, rt.method, path, `{}`)
			requireError(t, r, http.StatusUnauthorized, protocol.CodeUnauthorized, name+" token on "+rt.pattern())
		}
	}
	r := (&user{tg: tg}).do(t, "GET", "/v1/sync", nil, "Authorization", "Basic YTpi")
	requireError(t, r, http.StatusUnauthorized, protocol.CodeUnauthorized, "basic auth")

	tg.env.WaitCaughtUp(t, 30*time.Second)
	require.Equal(t, before, tg.snapshot(t), "bad input changed data")
}

// TestDevTokenOffOutsideDevMode: without DevMode there is no token endpoint.
func TestDevTokenOffOutsideDevMode(t *testing.T) {
	tg := newGateway(t, func(c *Config) { c.DevMode = false })
	r := (&user{tg: tg}).do(t, "POST", "/v1/dev/token", `{"user_id":1}`)
	requireError(t, r, http.StatusNotFound, protocol.CodeNotFound, "dev token")
}
