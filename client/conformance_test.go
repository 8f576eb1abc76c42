package client_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/client"
)

// The conformance scenarios shared with the other SDKs
// (clients/conformance/README.md describes the format).
const scenarioDir = "../clients/conformance/scenarios"

// scenarioDeadline bounds one scenario: the script consumed and the end
// state reached. It is a failure bound, never an expectation.
const scenarioDeadline = 10 * time.Second

type confScenario struct {
	Name      string          `json:"name"`
	Checks    string          `json:"checks"`
	Transport string          `json:"transport"` // websocket, polling or auto
	Config    scenarioConfig  `json:"config"`
	Start     startState      `json:"start"`
	Handler   handlerBehavior `json:"handler"`
	// Actions are the app's calls (uploads, sends, searches), made one after the
	// other on the first client while it runs.
	Actions []action    `json:"actions"`
	Script  []step      `json:"script"`
	Expect  expectation `json:"expect"`
}

// action is one call of the app's: exactly one of Upload, Send and
// Search, and what it must end with.
type action struct {
	Upload *uploadAction `json:"upload"`
	Send   *sendAction   `json:"send"`
	Search *searchAction `json:"search"`
	Expect outcome       `json:"expect"`
}

// searchAction is a search (Search), in the wire's names; with AllPages,
// every page of it (SearchPages).
type searchAction struct {
	Q              string `json:"q"`
	Prefix         *bool  `json:"prefix"`
	ConversationID int64  `json:"conversation_id"`
	SenderID       *int64 `json:"sender_id"`
	After          string `json:"after"`
	Before         string `json:"before"`
	AfterSeq       *int64 `json:"after_seq"`
	BeforeSeq      *int64 `json:"before_seq"`
	HasAttachment  *bool  `json:"has_attachment"`
	MentionsMe     bool   `json:"mentions_me"`
	Order          string `json:"order"`
	Limit          int    `json:"limit"`
	Cursor         string `json:"cursor"`
	AllPages       bool   `json:"all_pages"`
}

// query is s as the SDK's SearchQuery.
func (s searchAction) query() (client.SearchQuery, error) {
	q := client.SearchQuery{Q: s.Q, NoPrefix: s.Prefix != nil && !*s.Prefix, ConversationID: s.ConversationID,
		SenderID: s.SenderID, AfterSeq: s.AfterSeq, BeforeSeq: s.BeforeSeq, HasAttachment: s.HasAttachment,
		MentionsMe: s.MentionsMe, Order: client.SearchOrder(s.Order), Limit: s.Limit, Cursor: s.Cursor}
	for _, t := range []struct {
		in  string
		out *time.Time
	}{{s.After, &q.After}, {s.Before, &q.Before}} {
		if t.in == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, t.in)
		if err != nil {
			return q, err
		}
		*t.out = v
	}
	return q, nil
}

// searchFound is what a search found: its results as [conversation_id,
// seq], in order (every page's, with all_pages), the last page's
// next_cursor, the first page's estimated_total and how many pages were
// read.
type searchFound struct {
	Results        [][2]int64 `json:"results"`
	NextCursor     string     `json:"next_cursor"`
	EstimatedTotal *int64     `json:"estimated_total"`
	Pages          int        `json:"pages"`
}

// uploadAction uploads the conformance file of Size bytes (conformanceFile),
// or resumes upload ResumeID with it.
type uploadAction struct {
	ConversationID int64  `json:"conversation_id"`
	Name           string `json:"name"`
	ContentType    string `json:"content_type"`
	Size           int64  `json:"size"`
	ResumeID       string `json:"resume_id"`
}

// sendAction sends a message (SendWith) and waits for its result.
type sendAction struct {
	ConversationID int64    `json:"conversation_id"`
	Body           string   `json:"body"`
	Attachments    []string `json:"attachments"`
}

// outcome is how an action must end: exactly one field is set.
type outcome struct {
	// Upload: the call returned an upload of which this is a subset (as JSON).
	Upload json.RawMessage `json:"upload"`
	// Error: the call failed with the API error of this status, and no
	// upload to resume (not an UploadError).
	Error *struct {
		Status int `json:"status"`
	} `json:"error"`
	// UploadError: the upload failed after the server made it; the error
	// carries its id.
	UploadError *struct {
		ID string `json:"id"`
	} `json:"upload_error"`
	// Sent: the send ended with this message: its seq and the ids of its
	// attachments, in order.
	Sent *struct {
		Seq         int64    `json:"seq"`
		Attachments []string `json:"attachments"`
	} `json:"sent"`
	// Found: the search ended with these results.
	Found *searchFound `json:"found"`
}

type scenarioConfig struct {
	WSFallbackAfter int `json:"ws_fallback_after"`
}

type startState struct {
	Epoch         int64                       `json:"epoch"`
	Cursor        int64                       `json:"cursor"`
	Conversations map[string]conversationInit `json:"conversations"`
	Outbox        []outboxInit                `json:"outbox"`
}

type conversationInit struct {
	LastSeq     int64 `json:"last_seq"`
	Large       bool  `json:"large"`
	ChangeCount int64 `json:"change_count"`
}

type outboxInit struct {
	MsgID          string `json:"msg_id"`
	ConversationID int64  `json:"conversation_id"`
	Body           string `json:"body"`
}

type handlerBehavior struct {
	// FailOnce: the entry handler returns an error the first time it gets
	// each of these inbox_seqs; the runner then restarts the client on
	// the same store, as an app would.
	FailOnce []int64 `json:"fail_once"`
}

type step struct {
	Match   matcher     `json:"match"`
	Times   int         `json:"times"`     // answers this many matching requests; default 1
	MinTime *int        `json:"min_times"` // how many it must get; default Times
	Respond *httpAnswer `json:"respond"`   // nil with WS nil: hold the request
	WS      *wsScript   `json:"ws"`
	// AfterStep: the answer waits until the step of this index answered
	// (a long-poll answered when something happens elsewhere).
	AfterStep *int `json:"after_step"`
	// Sealed: the request (a PUT to the store) must carry this sealed
	// file or part; the fake server opens it (checkSealed).
	Sealed *sealedBody `json:"sealed"`
}

// sealedBody is what a PUT to the store must carry: the conformance file
// of Size bytes (conformanceFile) sealed with Key (docs/protocol.md,
// "Attachments"), whole, or only its part Part (from 1) in parts of
// PartSize plaintext bytes.
type sealedBody struct {
	Key      string `json:"key"`
	Size     int64  `json:"size"`
	PartSize int64  `json:"part_size"`
	Part     int64  `json:"part"`
}

func (s step) max() int { return max(s.Times, 1) }
func (s step) min() int {
	if s.MinTime != nil {
		return *s.MinTime
	}
	return s.max()
}

type matcher struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   map[string]string `json:"query"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

type httpAnswer struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

type wsScript struct {
	Frames []json.RawMessage `json:"frames"`
	// Replies answer the client's frames after the hello (sends, changes)
	// while the connection stays open: the first reply whose match is a
	// subset of the frame and that has uses left sends its frames.
	Replies []wsReply `json:"replies"`
	Close   *struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
	} `json:"close"`
}

type wsReply struct {
	Match  json.RawMessage   `json:"match"`
	Times  int               `json:"times"` // default 1
	Frames []json.RawMessage `json:"frames"`
}

type expectation struct {
	Requests      []expectedRequest     `json:"requests"`
	Entries       []int64               `json:"entries"`
	Cursor        int64                 `json:"cursor"`
	Epoch         int64                 `json:"epoch"`
	Outbox        []string              `json:"outbox"`
	Sent          map[string]int64      `json:"sent"`
	SendErrors    map[string]int        `json:"send_errors"`
	TooLong       []expectedTooLong     `json:"too_long"`
	Holes         map[string][][2]int64 `json:"holes"`
	Permanent     *expectedPermanent    `json:"permanent"`
	HandlerErrors int                   `json:"handler_errors"`
	Updates       [][3]int64            `json:"updates"`
	// LargeMessages: the messages handed to the entry handler with
	// inbox_seq 0 (read-mode conversations), as [conversation_id, seq].
	LargeMessages [][2]int64 `json:"large_messages"`
	// Handed: when present, everything the entry handler accepted, in
	// order, as [inbox_seq, conversation_id, message seq (0 without one)]:
	// the order of inbox entries and read-mode messages together.
	Handed [][3]int64 `json:"handed"`
	// Conversations: when present, the state of these conversations at
	// the end (others not checked).
	Conversations map[string]conversationInit `json:"conversations"`
}

type expectedRequest struct {
	matcher
	Times    *int `json:"times"` // exactly; default 1
	MinTimes *int `json:"min_times"`
	MaxTimes *int `json:"max_times"`
}

func (e expectedRequest) bounds() (lo, hi int) {
	lo, hi = 1, 1
	if e.Times != nil {
		lo, hi = *e.Times, *e.Times
	}
	if e.MinTimes != nil {
		lo = *e.MinTimes
	}
	if e.MaxTimes != nil {
		hi = *e.MaxTimes
	}
	return lo, max(lo, hi)
}

type expectedTooLong struct {
	Epoch    int64                 `json:"epoch"`
	Head     int64                 `json:"head"`
	NewHoles map[string][][2]int64 `json:"new_holes"`
}

type expectedPermanent struct {
	Status    int `json:"status"`
	CloseCode int `json:"close_code"`
}

// TestConformance runs every scenario of clients/conformance against the
// SDK: a fake gateway follows the scenario's script, the client runs on a
// memory store with its waits shrunk, and the requests it made and the
// state it ended with are compared with the scenario's expectations.
func TestConformance(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no scenario in %s", scenarioDir)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		var sc confScenario
		require.NoError(t, strictUnmarshal(raw, &sc), f)
		require.Equal(t, filepath.Base(f), sc.Name+".json", "a scenario's file is named after it")
		for i, a := range sc.Actions {
			calls := 0
			for _, set := range []bool{a.Upload != nil, a.Send != nil, a.Search != nil} {
				if set {
					calls++
				}
			}
			require.Equal(t, 1, calls, "%s: action %d is one upload, one send or one search", f, i)
			n := 0
			for _, set := range []bool{a.Expect.Upload != nil, a.Expect.Error != nil, a.Expect.UploadError != nil, a.Expect.Sent != nil, a.Expect.Found != nil} {
				if set {
					n++
				}
			}
			require.Equal(t, 1, n, "%s: action %d expects one outcome", f, i)
		}
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			runScenario(t, sc)
		})
	}
}

func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// errAppRefused is the error of the app's entry handler (handler.fail_once).
var errAppRefused = errors.New("conformance: the app failed")

// observed is what the app saw.
type observed struct {
	mu            sync.Mutex
	entries       []int64
	tooLongs      []client.TooLong
	results       map[string]client.SendResult
	handlerErrors int
	updates       [][3]int64 // (conversation, seq, version) handed to OnUpdate
	largeMessages [][2]int64 // (conversation, seq) handed to OnEntry with inbox_seq 0
	handed        [][3]int64 // (inbox_seq, conversation, seq) of every accepted OnEntry
	failed        map[int64]bool
	actions       []actionResult  // how the app's calls ended, in order
	appSends      map[string]bool // msg_ids of the sends the actions made
}

// actionResult is how one of the app's calls ended.
type actionResult struct {
	upload *client.Upload
	sent   *client.SendResult
	found  *searchFound
	err    error
}

func (o *observed) handler(fail []int64) client.Handler {
	return client.Handler{
		OnEntry: func(_ context.Context, e client.Entry) error {
			o.mu.Lock()
			defer o.mu.Unlock()
			var seq int64
			if e.Message != nil {
				seq = e.Message.Seq
			}
			if e.InboxSeq == 0 && e.Message != nil {
				o.largeMessages = append(o.largeMessages, [2]int64{e.ConversationID, e.Message.Seq})
				o.handed = append(o.handed, [3]int64{0, e.ConversationID, seq})
				return nil
			}
			if slices.Contains(fail, e.InboxSeq) && !o.failed[e.InboxSeq] {
				o.failed[e.InboxSeq] = true
				o.handlerErrors++
				return fmt.Errorf("entry %d: %w", e.InboxSeq, errAppRefused)
			}
			o.handed = append(o.handed, [3]int64{e.InboxSeq, e.ConversationID, seq})
			o.entries = append(o.entries, e.InboxSeq)
			return nil
		},
		OnUpdate: func(_ context.Context, m client.Message) error {
			o.mu.Lock()
			o.updates = append(o.updates, [3]int64{m.ConversationID, m.Seq, m.Version})
			o.mu.Unlock()
			return nil
		},
		OnTooLong: func(_ context.Context, tl client.TooLong) error {
			o.mu.Lock()
			o.tooLongs = append(o.tooLongs, tl)
			o.mu.Unlock()
			return nil
		},
		OnSendResult: func(_ context.Context, r client.SendResult) {
			o.mu.Lock()
			o.results[r.MsgID] = r
			o.mu.Unlock()
		},
	}
}

func runScenario(t *testing.T, sc confScenario) {
	srv := newScriptServer(t, sc.Script)
	store := client.NewMemoryStore()
	require.NoError(t, store.Save(context.Background(), startingState(sc.Start)))
	obs := &observed{results: map[string]client.SendResult{}, failed: map[int64]bool{}, appSends: map[string]bool{}}
	cfg := conformanceConfig(t, sc, srv.srv.URL, store, obs.handler(sc.Handler.FailOnce))

	ctx, cancel := context.WithTimeout(context.Background(), scenarioDeadline)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	first := make(chan *client.Client, 1)
	go func() { runErr <- runUntilStopped(runCtx, t, cfg, obs, first) }()
	actionsDone := make(chan struct{})
	go func() {
		defer close(actionsDone)
		select {
		case c := <-first:
			runActions(runCtx, c, sc.Actions, obs)
		case <-runCtx.Done():
		}
	}()

	var err error
	finished := false
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err = <-runErr:
			finished = true
			break wait
		case <-ctx.Done():
			break wait
		case <-tick.C:
			if srv.consumed() && reached(store, obs, sc.Expect, len(sc.Actions)) {
				break wait
			}
		}
	}
	stop()
	if !finished {
		err = <-runErr
	}
	<-actionsDone
	srv.close()
	log := srv.requests()
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CONFORMANCE_LOG") != "" {
			logJSON, _ := json.Marshal(log)
			t.Logf("requests: %s", logJSON)
		}
	})
	if ctx.Err() != nil {
		// The checks below say what differs; this says why it took so long.
		t.Errorf("the scenario did not end within %s (every step used: %v)", scenarioDeadline, srv.consumed())
	}
	checkScenario(t, sc.Expect, log, store, obs, err)
	checkActions(t, sc.Actions, obs)
}

// runUntilStopped runs a client until ctx ends or it stops with an error
// other than one of the app's handler errors; after those it starts a new
// client on the same store, as an app restarting would.
// The first client goes to first, for the app's actions.
func runUntilStopped(ctx context.Context, t *testing.T, cfg client.Config, obs *observed, first chan<- *client.Client) error {
	for {
		c, err := client.New(cfg)
		if err != nil {
			return err
		}
		select {
		case first <- c:
		default:
		}
		err = c.Run(ctx)
		if !errors.Is(err, errAppRefused) || ctx.Err() != nil {
			return err
		}
		t.Logf("restarting after the app's error: %v", err)
	}
}

// runActions makes the app's calls on c, one after the other, and
// records how each ended.
func runActions(ctx context.Context, c *client.Client, actions []action, obs *observed) {
	for _, a := range actions {
		var r actionResult
		switch {
		case a.Upload != nil:
			u := a.Upload
			f := client.UploadFile{Name: u.Name, ContentType: u.ContentType, Size: u.Size,
				Body: bytes.NewReader(conformanceFile(u.Size))}
			var up client.Upload
			if u.ResumeID != "" {
				up, r.err = c.ResumeUpload(ctx, u.ConversationID, u.ResumeID, f)
			} else {
				up, r.err = c.Upload(ctx, u.ConversationID, f)
			}
			if r.err == nil {
				r.upload = &up
			}
		case a.Send != nil:
			r.sent, r.err = sendAndWait(ctx, c, *a.Send, obs)
		case a.Search != nil:
			r.found, r.err = search(ctx, c, *a.Search)
		}
		if ctx.Err() != nil {
			return // stopped: the action did not end
		}
		obs.mu.Lock()
		obs.actions = append(obs.actions, r)
		obs.mu.Unlock()
	}
}

// search makes the search s (every page with AllPages) and returns what
// it found.
func search(ctx context.Context, c *client.Client, s searchAction) (*searchFound, error) {
	q, err := s.query()
	if err != nil {
		return nil, err
	}
	found := &searchFound{Results: [][2]int64{}}
	add := func(p *client.SearchPage) {
		for _, r := range p.Results {
			found.Results = append(found.Results, [2]int64{r.Message.ConversationID, r.Message.Seq})
		}
		if found.Pages == 0 {
			found.EstimatedTotal = p.EstimatedTotal
		}
		found.NextCursor = p.NextCursor
		found.Pages++
	}
	if !s.AllPages {
		p, err := c.Search(ctx, q)
		if err != nil {
			return nil, err
		}
		add(p)
		return found, nil
	}
	for p, err := range c.SearchPages(ctx, q) {
		if err != nil {
			return nil, err
		}
		add(p)
	}
	return found, nil
}

// sendAndWait sends s and waits for its result (OnSendResult).
func sendAndWait(ctx context.Context, c *client.Client, s sendAction, obs *observed) (*client.SendResult, error) {
	id, err := c.SendWith(ctx, s.ConversationID, s.Body, client.SendOptions{Attachments: s.Attachments})
	if err != nil {
		return nil, err
	}
	obs.mu.Lock()
	obs.appSends[id] = true
	obs.mu.Unlock()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		obs.mu.Lock()
		r, ok := obs.results[id]
		obs.mu.Unlock()
		if ok {
			return &r, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// conformanceFile is the file of size bytes the scenarios upload: byte i
// is i*7 mod 251 (a prime: no period aligned with a chunk).
func conformanceFile(size int64) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i * 7 % 251)
	}
	return b
}

func startingState(s startState) *client.State {
	st := &client.State{Format: client.StateFormat, Epoch: s.Epoch, Cursor: s.Cursor,
		Conversations: map[int64]*client.ConversationState{}}
	for id, c := range s.Conversations {
		cid, _ := strconv.ParseInt(id, 10, 64)
		st.Conversations[cid] = &client.ConversationState{LastSeq: c.LastSeq, Large: c.Large, ChangeCount: c.ChangeCount}
	}
	for _, o := range s.Outbox {
		st.Outbox = append(st.Outbox, client.OutboxItem{MsgID: o.MsgID, ConversationID: o.ConversationID, Body: o.Body})
	}
	return st
}

// conformanceConfig shrinks every wait of the SDK so that a scenario runs
// in milliseconds; nothing is asserted about durations.
func conformanceConfig(t *testing.T, sc confScenario, url string, store client.Store, h client.Handler) client.Config {
	tr := map[string]client.Transport{"": client.TransportAuto, "auto": client.TransportAuto,
		"websocket": client.TransportWebSocket, "polling": client.TransportPolling}
	transport, ok := tr[sc.Transport]
	require.True(t, ok, "transport %q", sc.Transport)
	return client.Config{
		BaseURL: url, Token: "conformance", Store: store, Handler: h, Transport: transport,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		StartupJitter:  -1,
		BackoffInitial: time.Millisecond, BackoffMax: 10 * time.Millisecond,
		StablePeriod:     time.Hour, // every session counts as short: WSFallbackAfter is what decides
		BreakerThreshold: 1000, BreakerCooldown: 10 * time.Millisecond,
		WSFallbackAfter: cmp.Or(sc.Config.WSFallbackAfter, 1000), // no fallback unless the scenario asks
		PollingPeriod:   time.Hour,
		LongPollWait:    time.Second,
		GapWait:         20 * time.Millisecond, HeadWait: 20 * time.Millisecond,
		RequestTimeout: 5 * time.Second, SendTimeout: time.Second, PendingRecheck: 10 * time.Millisecond,
	}
}

// reached reports whether the client's state got to the expected end.
func reached(store *client.MemoryStore, obs *observed, e expectation, actions int) bool {
	st, _ := store.Load(context.Background())
	if st == nil || st.Cursor != e.Cursor || st.Epoch != e.Epoch || len(st.Outbox) != len(e.Outbox) {
		return false
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.actions) < actions {
		return false
	}
	for id, want := range e.Conversations {
		cid, _ := strconv.ParseInt(id, 10, 64)
		if cs := st.Conversations[cid]; cs == nil || cs.LastSeq != want.LastSeq || cs.ChangeCount != want.ChangeCount || cs.Large != want.Large {
			return false
		}
	}
	return len(obs.entries) >= len(e.Entries) && len(obs.updates) >= len(e.Updates) && len(obs.largeMessages) >= len(e.LargeMessages) && len(obs.results) >= len(e.Sent)+len(e.SendErrors) &&
		len(obs.tooLongs) >= len(e.TooLong) && e.Permanent == nil
}

func checkScenario(t *testing.T, e expectation, log []loggedRequest, store *client.MemoryStore, obs *observed, runErr error) {
	for _, r := range log {
		require.False(t, r.Early, "%s %s came before the Retry-After of the answer before it", r.Method, r.Path)
		require.Empty(t, r.BadBody, "%s %s: the sealed body", r.Method, r.Path)
	}
	checkRequests(t, e.Requests, log)

	var pe *client.PermanentError
	if e.Permanent != nil {
		require.ErrorAs(t, runErr, &pe, "the client should have stopped for good")
		require.Equal(t, e.Permanent.Status, pe.Status, "permanent error status")
		require.Equal(t, e.Permanent.CloseCode, pe.CloseCode, "permanent error close code")
	} else {
		require.NoError(t, runErr, "the client stopped")
	}

	st, err := store.Load(context.Background())
	require.NoError(t, err)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, orEmpty(e.Entries), orEmpty(obs.entries), "inbox_seqs handed to the app, in order, each once")
	require.Equal(t, e.Cursor, st.Cursor, "cursor")
	require.Equal(t, e.Epoch, st.Epoch, "epoch")
	var outbox []string
	for _, it := range st.Outbox {
		outbox = append(outbox, it.MsgID)
	}
	require.Equal(t, orEmpty(e.Outbox), orEmpty(outbox), "outbox")
	require.Equal(t, e.HandlerErrors, obs.handlerErrors, "handler errors")
	require.Equal(t, orEmpty(e.Updates), orEmpty(obs.updates), "(conversation, seq, version) handed to OnUpdate, in order, each once")
	require.Equal(t, orEmpty(e.LargeMessages), orEmpty(obs.largeMessages), "(conversation, seq) handed to OnEntry with inbox_seq 0, in order, each once")
	if e.Handed != nil {
		require.Equal(t, e.Handed, obs.handed, "(inbox_seq, conversation, seq) accepted by OnEntry, in order")
	}
	for id, want := range e.Conversations {
		cid, _ := strconv.ParseInt(id, 10, 64)
		cs := st.Conversations[cid]
		require.NotNil(t, cs, "conversation %s in the store", id)
		require.Equal(t, want, conversationInit{LastSeq: cs.LastSeq, Large: cs.Large, ChangeCount: cs.ChangeCount}, "conversation %s in the store", id)
	}

	sent, sendErrs := map[string]int64{}, map[string]int{}
	for id, r := range obs.results {
		if obs.appSends[id] {
			continue // an action's send: checked with the action
		}
		var ae *client.APIError
		switch {
		case r.Message != nil:
			sent[id] = r.Message.Seq
		case errors.As(r.Err, &ae):
			sendErrs[id] = ae.Status
		default:
			sendErrs[id] = -1
		}
	}
	require.Equal(t, orEmptyMap(e.Sent), sent, "sends ended with a seq")
	require.Equal(t, orEmptyMap(e.SendErrors), sendErrs, "sends refused")

	require.Len(t, obs.tooLongs, len(e.TooLong), "too_long handed to the app")
	for i, want := range e.TooLong {
		got := obs.tooLongs[i]
		require.Equal(t, want.Epoch, got.Epoch, "too_long %d epoch", i)
		require.Equal(t, want.Head, got.Head, "too_long %d head", i)
		require.Equal(t, orEmptyMap(want.NewHoles), holesJSON(got.NewHoles), "too_long %d new holes", i)
	}
	if e.Holes != nil {
		got := map[int64][]client.Hole{}
		for id, cs := range st.Conversations {
			if len(cs.Holes) > 0 {
				got[id] = cs.Holes
			}
		}
		require.Equal(t, e.Holes, holesJSON(got), "holes in the store")
	}
}

// checkActions compares how each of the app's calls ended with its
// expected outcome.
func checkActions(t *testing.T, actions []action, obs *observed) {
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Len(t, obs.actions, len(actions), "the app's actions that ended")
	for i, a := range actions {
		got, want := obs.actions[i], a.Expect
		var ue *client.UploadError
		var ae *client.APIError
		switch {
		case want.Upload != nil:
			require.NoError(t, got.err, "action %d", i)
			raw, err := json.Marshal(got.upload)
			require.NoError(t, err)
			var w, g any
			require.NoError(t, json.Unmarshal(want.Upload, &w))
			require.NoError(t, json.Unmarshal(raw, &g))
			require.True(t, subset(w, g), "action %d: the upload %s, want (a subset) %s", i, raw, want.Upload)
		case want.Error != nil:
			require.Error(t, got.err, "action %d", i)
			require.False(t, errors.As(got.err, &ue), "action %d: an upload error (%v), want an API error alone", i, got.err)
			require.ErrorAs(t, got.err, &ae, "action %d", i)
			require.Equal(t, want.Error.Status, ae.Status, "action %d: the API error's status", i)
		case want.UploadError != nil:
			require.ErrorAs(t, got.err, &ue, "action %d: want an upload error", i)
			require.Equal(t, want.UploadError.ID, ue.ID, "action %d: the upload error's id", i)
		case want.Sent != nil:
			require.NoError(t, got.err, "action %d", i)
			require.NoError(t, got.sent.Err, "action %d: the send's result", i)
			require.NotNil(t, got.sent.Message, "action %d: the send's message", i)
			ids := []string{}
			for _, at := range got.sent.Message.Attachments {
				ids = append(ids, at.ID)
			}
			require.Equal(t, want.Sent.Seq, got.sent.Message.Seq, "action %d: the sent message's seq", i)
			require.Equal(t, orEmpty(want.Sent.Attachments), ids, "action %d: the sent message's attachments", i)
		case want.Found != nil:
			require.NoError(t, got.err, "action %d", i)
			want := *want.Found
			want.Results = orEmpty(want.Results)
			require.Equal(t, want, *got.found, "action %d: what the search found", i)
		}
	}
}

// checkRequests compares the log with the expected requests, path by path:
// the sync loop and the outbox run concurrently, so only the order within
// one path is part of the contract. Held requests (beyond the script) are
// not checked.
func checkRequests(t *testing.T, want []expectedRequest, log []loggedRequest) {
	paths := map[string]bool{}
	for _, w := range want {
		paths[w.Path] = true
	}
	for _, r := range log {
		if r.Step >= 0 {
			paths[r.Path] = true
		}
	}
	for p := range paths {
		var got []loggedRequest
		for _, r := range log {
			if r.Path == p && r.Step >= 0 {
				got = append(got, r)
			}
		}
		i := 0
		for k, w := range want {
			if w.Path != p {
				continue
			}
			lo, hi := w.bounds()
			n := 0
			for n < hi && i < len(got) && w.matcher.matches(got[i]) {
				n++
				i++
			}
			require.GreaterOrEqual(t, n, lo, "expected request %d (%s %s %v %s): %d matched in a row at position %d of %s",
				k, w.Method, w.Path, w.Query, w.Body, n, i, p)
		}
		require.Equal(t, len(got), i, "requests to %s beyond the expected ones (from position %d)", p, i)
	}
}

func holesJSON(m map[int64][]client.Hole) map[string][][2]int64 {
	out := map[string][][2]int64{}
	for id, hs := range m {
		for _, h := range hs {
			out[strconv.FormatInt(id, 10)] = append(out[strconv.FormatInt(id, 10)], [2]int64{h.From, h.To})
		}
	}
	return out
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func orEmptyMap[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return m
}
