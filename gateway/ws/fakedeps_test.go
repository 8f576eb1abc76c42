package ws

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// Fakes of the small interfaces of Deps.

// fakeAuth takes "Bearer <user id>"; "Bearer later" is a token that cannot
// be checked yet (retryable), anything else is refused.
type fakeAuth struct{}

func (fakeAuth) Authenticate(r *http.Request) (Identity, error) {
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "" {
		tok = r.URL.Query().Get("access_token")
	}
	if tok == "later" {
		return Identity{}, apierr.Unavailable("the identity provider's keys are not loaded yet", 3*time.Second, nil)
	}
	u, err := strconv.ParseInt(tok, 10, 64)
	if err != nil || u <= 0 {
		return Identity{}, apierr.Unauthorized("invalid token")
	}
	return Identity{User: u}, nil
}

// sendCall is one call of fakeSender.Send.
type sendCall struct {
	user int64
	req  SendRequest
}

// fakeSender answers sends with answer (default: projected at seq 100 +
// the call's number); calls, when set, gets every call as it starts.
type fakeSender struct {
	mu     sync.Mutex
	n      int64
	calls  chan sendCall
	answer func(ctx context.Context, c sendCall) (int64, bool, error)
}

// answerWith sets the answer of the sends from now on.
func (f *fakeSender) answerWith(a func(ctx context.Context, c sendCall) (int64, bool, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = a
}

// called is the number of sends so far.
func (f *fakeSender) called() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *fakeSender) Send(ctx context.Context, user int64, req SendRequest) (SendAnswer, error) {
	seq, pending, err := f.send(ctx, user, req)
	return SendAnswer{Seq: seq, Pending: pending}, err
}

func (f *fakeSender) send(ctx context.Context, user int64, req SendRequest) (int64, bool, error) {
	c := sendCall{user: user, req: req}
	f.mu.Lock()
	f.n++
	n, answer, calls := f.n, f.answer, f.calls
	f.mu.Unlock()
	if calls != nil {
		calls <- c
	}
	if answer != nil {
		return answer(ctx, c)
	}
	return 100 + n, false, nil
}

// changeCall is one call of fakeChanger.Change.
type changeCall struct {
	user int64
	req  ChangeRequest
}

// fakeChanger answers changes with answer (default: the message at
// version 2).
type fakeChanger struct {
	mu     sync.Mutex
	calls  chan changeCall
	answer func(c changeCall) (*protocol.Message, bool, error)
}

func (f *fakeChanger) answerWith(a func(c changeCall) (*protocol.Message, bool, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = a
}

func (f *fakeChanger) Change(_ context.Context, user int64, req ChangeRequest) (*protocol.Message, bool, error) {
	c := changeCall{user: user, req: req}
	f.mu.Lock()
	calls, answer := f.calls, f.answer
	f.mu.Unlock()
	if calls != nil {
		calls <- c
	}
	if answer != nil {
		return answer(c)
	}
	return &protocol.Message{ConversationID: req.ConversationID, Seq: req.Seq, Version: 2}, false, nil
}

// fakeRebaser answers with a too-long answer at the head it is given and
// one conversation, 7; err fails it.
type fakeRebaser struct {
	mu    sync.Mutex
	err   error
	calls []*inbox.Result
}

func (f *fakeRebaser) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeRebaser) Rebase(_ context.Context, _ int64, at *inbox.Result) (*protocol.TooLong, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, at)
	if f.err != nil {
		return nil, f.err
	}
	return &protocol.TooLong{TooLong: true, Epoch: at.Epoch, Head: at.Head, RecordVersion: at.RecordVersion,
		Conversations: []protocol.Record{{ConversationID: 7, Title: "seven"}}, Large: at.Large}, nil
}

func (f *fakeRebaser) called() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// typingCall is one call of fakeEphemeral.Typing.
type typingCall struct {
	user, cid int64
	stop      bool
}

// joined is a session registered with fakeEphemeral.
type joined struct {
	user    int64
	deliver func(kind string, frame []byte) bool
	left    chan struct{}
}

// fakeEphemeral records the sessions that join it and the typing frames
// they send; typingErr answers those.
type fakeEphemeral struct {
	joins     chan *joined
	typings   chan typingCall
	mu        sync.Mutex
	typingErr error
}

var errNotMember = apierr.NotMember("not a member of conversation 11")

func (f *fakeEphemeral) failTyping(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.typingErr = err
}

func newFakeEphemeral() *fakeEphemeral {
	return &fakeEphemeral{joins: make(chan *joined, 16), typings: make(chan typingCall, 16)}
}

func (f *fakeEphemeral) Join(user int64, deliver func(kind string, frame []byte) bool) func() {
	j := &joined{user: user, deliver: deliver, left: make(chan struct{})}
	f.joins <- j
	var once sync.Once
	return func() { once.Do(func() { close(j.left) }) }
}

func (f *fakeEphemeral) Typing(_ context.Context, user, cid int64, stop bool) (string, error) {
	f.typings <- typingCall{user: user, cid: cid, stop: stop}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.typingErr != nil {
		return "failed", f.typingErr
	}
	return "broadcast", nil
}

// fakeAdmission admits while admit is true (else come back after 3s);
// a drain's n sessions come back 100ms apart from 1s; the hint's window
// is the session count.
type fakeAdmission struct {
	mu    sync.Mutex
	admit bool
}

func (f *fakeAdmission) Admit() (bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.admit, 3 * time.Second
}

func (f *fakeAdmission) Spread(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Second + time.Duration(i)*100*time.Millisecond
	}
	return out
}

func (f *fakeAdmission) Hint(n int) *protocol.Reconnect {
	return &protocol.Reconnect{AfterMS: 250, WindowMS: int64(n)}
}
