package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/protocol"
)

// maxWait is the longest long-poll of the protocol (docs/protocol.md: wait
// 0..30 seconds): the load balancer must hold it.
const maxWait = 30

// byCommand finds the instances of the inboxd services running a
// subcommand, and the load balancer's, by what they run rather than by the
// names the file gives them.
func byCommand(tp *topology, repo, command string) []*instance {
	var out []*instance
	for _, ins := range tp.instances {
		s := ins[0].svc
		if s.repo() == repo && (command == "" || (len(s.Command) > 0 && s.Command[0] == command)) {
			out = append(out, ins...)
		}
	}
	return out
}

type apiClient struct {
	name  string // for messages: gateway-1, lb
	base  string
	token string
}

func (c *apiClient) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := &http.Client{Timeout: (maxWait + 15) * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s via %s: %w", method, path, c.name, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s via %s: %d %s: %w", method, path, c.name, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode, nil
}

func (c *apiClient) sync(ctx context.Context, t *testing.T, after int64, wait int) protocol.SyncAnswer {
	t.Helper()
	var a protocol.SyncAnswer
	code, err := c.do(ctx, "GET", fmt.Sprintf("/v1/sync?after=%d&wait=%d", after, wait), nil, &a)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "sync via %s", c.name)
	require.False(t, a.TooLong, "sync via %s", c.name)
	return a
}

func (c *apiClient) send(ctx context.Context, t *testing.T, conv int64, body string) {
	t.Helper()
	var m protocol.Message
	code, err := c.do(ctx, "POST", fmt.Sprintf("/v1/conversations/%d/messages", conv),
		protocol.SendMessage{MsgID: uuid.NewString(), Body: body}, &m)
	require.NoError(t, err)
	require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, code, "send via %s", c.name)
}

func bodies(es []protocol.Entry) []string {
	var out []string
	for _, e := range es {
		if e.Message != nil {
			out = append(out, e.Message.Text())
		}
	}
	return out
}

// checkTraffic sends and receives through every gateway and through the
// load balancer. It returns a function that waits for the long-poll it
// keeps held through the load balancer for the protocol's longest wait
// (so that the monitoring checks run meanwhile).
func checkTraffic(t *testing.T, ctx context.Context, tp *topology, secret string, logf func(string, ...any)) (finish func()) {
	gws := byCommand(tp, "inboxd", "gateway")
	require.GreaterOrEqual(t, len(gws), 2, "the gateway runs scaled")
	lb, lbAddr := loadBalancer(t, tp)
	tok := func(user int64) string { return token(t, secret, user) }
	const alice, bob, carol = 1001, 1002, 1003
	via := func(in *instance, user int64) *apiClient {
		if in == lb {
			return &apiClient{name: "the load balancer", base: "http://" + lbAddr, token: tok(user)}
		}
		a, err := in.addr(portOf(t, in))
		require.NoError(t, err)
		return &apiClient{name: in.name, base: "http://" + a, token: tok(user)}
	}

	// Held for the longest wait through the load balancer, while the rest
	// runs: the LB's timeouts must let it through.
	held := make(chan error, 1)
	go func() {
		t0 := time.Now()
		var a protocol.SyncAnswer
		code, err := via(lb, carol).do(ctx, "GET", fmt.Sprintf("/v1/sync?after=0&wait=%d", maxWait), nil, &a)
		switch {
		case err != nil:
			held <- err
		case code != http.StatusOK || len(a.Entries) != 0:
			held <- fmt.Errorf("a held poll through the load balancer answered %d with %d entries", code, len(a.Entries))
		case time.Since(t0) < (maxWait-1)*time.Second:
			held <- fmt.Errorf("a poll with wait=%d through the load balancer answered after %v", maxWait, time.Since(t0))
		default:
			logf("a long-poll with wait=%d held through the load balancer answered after %.1fs", maxWait, time.Since(t0).Seconds())
			held <- nil
		}
	}()

	var conv protocol.ConversationCreated
	code, err := via(gws[0], alice).do(ctx, "POST", "/v1/conversations",
		protocol.CreateConversation{Title: "compose", Members: []int64{bob}}, &conv)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)

	// A send through one answers a long-poll held on another, each way, and
	// through the load balancer.
	pairs := [][2]*instance{{gws[0], gws[1]}, {gws[1], gws[0]}, {lb, lb}}
	for i, pr := range pairs {
		from, to := via(pr[0], alice), via(pr[1], bob)
		head := to.sync(ctx, t, 0, 0).Head
		got := make(chan protocol.SyncAnswer, 1)
		go func() { got <- to.sync(ctx, t, head, 25) }()
		time.Sleep(300 * time.Millisecond) // mostly held by now; either way it must answer
		body := fmt.Sprintf("message %d, sent via %s", i, from.name)
		t0 := time.Now()
		from.send(ctx, t, conv.ConversationID, body)
		select {
		case a := <-got:
			require.Contains(t, bodies(a.Entries), body, "the long-poll via %s", to.name)
			logf("sent via %s, received by a long-poll held via %s (%.0f ms)", from.name, to.name, float64(time.Since(t0).Microseconds())/1000)
		case <-time.After(20 * time.Second):
			t.Fatalf("the long-poll via %s did not get %q", to.name, body)
		}
	}

	checkWebSocket(t, ctx, lbAddr, via(lb, alice), tok(bob), conv.ConversationID, via(gws[0], alice), logf)
	checkBackendsUp(t, ctx, lb, len(gws), logf)

	return func() {
		select {
		case err := <-held:
			require.NoError(t, err)
		case <-time.After((maxWait + 20) * time.Second):
			t.Fatal("the long-poll held through the load balancer never answered")
		}
	}
}

// loadBalancer is the load balancer's instance and the address of the
// port it publishes, where clients connect.
func loadBalancer(t *testing.T, tp *topology) (*instance, string) {
	t.Helper()
	lbs := byCommand(tp, "haproxy", "")
	require.Len(t, lbs, 1, "one load balancer")
	public, err := lbs[0].svc.published()
	require.NoError(t, err)
	require.NotEmpty(t, public, "the load balancer publishes the public port")
	addr, err := lbs[0].addr(public[0])
	require.NoError(t, err)
	return lbs[0], addr
}

// token is a bearer token of user, signed with the gateways' secret.
func token(t *testing.T, secret string, user int64) string {
	t.Helper()
	s, err := gateway.IssueToken([]byte(secret), user, time.Hour)
	require.NoError(t, err)
	return s
}

// portOf is the port an inboxd instance listens on (its INBOXD_HTTP_ADDR).
func portOf(t *testing.T, in *instance) int {
	addr := in.svc.Environment["INBOXD_HTTP_ADDR"]
	p, err := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	require.NoError(t, err, "%s: INBOXD_HTTP_ADDR %q", in.name, addr)
	return p
}

// checkWebSocket: bob's WebSocket through the load balancer receives what
// alice sends over HTTP, and what bob sends on it reaches alice's sync.
func checkWebSocket(t *testing.T, ctx context.Context, lbAddr string, aliceLB *apiClient, bobToken string, conv int64, aliceGW *apiClient, logf func(string, ...any)) {
	h := http.Header{"Authorization": {"Bearer " + bobToken}}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.DialContext(ctx, "ws://"+lbAddr+"/v1/ws", h)
	require.NoError(t, err, "WebSocket upgrade through the load balancer")
	resp.Body.Close()
	defer ws.Close()
	next := func(want string) protocol.ServerFrame {
		t.Helper()
		for {
			require.NoError(t, ws.SetReadDeadline(time.Now().Add(20*time.Second)))
			var f protocol.ServerFrame
			require.NoError(t, ws.ReadJSON(&f), "waiting for a %s frame", want)
			require.NotEqual(t, protocol.FrameError, f.Type, "error frame: %s %s", f.Code, f.ErrorMessage())
			if f.Type == want {
				return f
			}
		}
	}
	require.NoError(t, ws.WriteJSON(protocol.Hello{Type: protocol.FrameHello, After: 0}))
	w := next(protocol.FrameWelcome)
	head := w.Head
	for head > 0 { // the catch-up up to the head
		f := next(protocol.FrameEntries)
		if len(f.Entries) > 0 && f.Entries[len(f.Entries)-1].InboxSeq >= w.Head {
			break
		}
	}
	body := "pushed over the WebSocket through the load balancer"
	aliceGW.send(ctx, t, conv, body)
	for {
		f := next(protocol.FrameEntries)
		if contains(bodies(f.Entries), body) {
			break
		}
	}
	logf("sent via %s, pushed to a WebSocket through the load balancer", aliceGW.name)

	aliceHead := aliceLB.sync(ctx, t, 0, 0).Head
	msgID := uuid.NewString()
	require.NoError(t, ws.WriteJSON(protocol.Send{Type: protocol.FrameSend, ConversationID: conv, MsgID: msgID, Body: "sent on the WebSocket"}))
	ack := next(protocol.FrameSendAck)
	require.Equal(t, msgID, ack.MsgID)
	a := aliceLB.sync(ctx, t, aliceHead, 20)
	require.Contains(t, bodies(a.Entries), "sent on the WebSocket")
	logf("sent on the WebSocket through the load balancer (seq %d), received by a long-poll through it", ack.Seq)
	_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// checkBackendsUp: the load balancer's own health checks (GET /readyz) hold
// every gateway up, as its Prometheus exporter says.
func checkBackendsUp(t *testing.T, ctx context.Context, lb *instance, want int, logf func(string, ...any)) {
	ports, err := lb.svc.containerPorts()
	require.NoError(t, err)
	var metrics string
	for _, p := range ports {
		a, _ := lb.addr(p)
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+a+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(raw), "haproxy_") {
			metrics = string(raw)
			break
		}
	}
	require.NotEmpty(t, metrics, "the load balancer exports Prometheus metrics on one of its ports")
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "haproxy_backend_active_servers{") {
			f := strings.Fields(line)
			n, _ := strconv.ParseFloat(f[len(f)-1], 64)
			require.Equal(t, float64(want), n, "%s: every gateway is up behind the load balancer", line)
			found = true
		}
	}
	require.True(t, found, "haproxy_backend_active_servers is exported")
	logf("the load balancer holds all %d gateways up (its checks of /readyz)", want)
}

// checkPostgresCommand: the server runs with the compose command's
// settings (-c name=value), not the defaults.
func checkPostgresCommand(t *testing.T, ctx context.Context, tp *topology, logf func(string, ...any)) {
	for _, in := range byCommand(tp, "postgres", "") {
		env := in.svc.Environment
		a, err := in.addr(5432)
		require.NoError(t, err)
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], a, env["POSTGRES_DB"]))
		require.NoError(t, err, "connect as the file's POSTGRES_USER to POSTGRES_DB")
		for i, arg := range in.svc.Command {
			k, v, ok := strings.Cut(arg, "=")
			if !ok || i == 0 || in.svc.Command[i-1] != "-c" {
				continue
			}
			var got string
			require.NoError(t, c.QueryRow(ctx, "SELECT current_setting($1)", k).Scan(&got))
			require.Equal(t, v, got, "%s from the compose command", k)
			logf("%s runs with %s=%s, from its command", in.name, k, got)
		}
		c.Close(ctx)
	}
}
