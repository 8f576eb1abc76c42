package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/internal/config"
)

// The client commands (login, send, tail): thin wiring of
// the client package for people and scripts. State lives under --state:
// login.json (the gateway URL, user and token, 0600) and, per user, the
// client state files of tail (its cursor) and send (its outbox).

// clientFlags are the settings the client commands share.
type clientFlags struct {
	url       string
	state     string
	token     string
	jsonOut   bool
	logLevel  string
	logFormat string
}

func (f *clientFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "url", "", "gateway URL, http(s)://host:port (default: the one of inboxd login, else http://127.0.0.1:8080)")
	fs.StringVar(&f.state, "state", "", "directory of the login and client state (default: <user config dir>/inboxd)")
	fs.StringVar(&f.token, "token", "", "bearer token (default: the one saved by inboxd login)")
	fs.BoolVar(&f.jsonOut, "json", false, "print JSON (one object per line) for scripts")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
}

// cliLogin is what inboxd login saves.
type cliLogin struct {
	URL    string    `json:"url"`
	UserID int64     `json:"user_id"`
	Token  string    `json:"token"`
	Saved  time.Time `json:"saved"`
}

const defaultClientURL = "http://127.0.0.1:8080"

func (f *clientFlags) stateDir() (string, error) {
	if f.state != "" {
		return f.state, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no user config directory (set --state or INBOXD_STATE): %w", err)
	}
	return filepath.Join(dir, "inboxd"), nil
}

// open resolves the session and the logger and opens the command's own
// state file (name) in the user's state directory.
func (f *clientFlags) open(name string) (cliLogin, *slog.Logger, *client.FileStore, error) {
	l, dir, err := f.session()
	if err != nil {
		return l, nil, nil, err
	}
	log, err := f.logger()
	if err != nil {
		return l, nil, nil, err
	}
	store, err := client.OpenFileStore(filepath.Join(userDir(dir, l), name))
	if err != nil {
		return l, nil, nil, err
	}
	return l, log, store, nil
}

// session resolves the URL, token and user from the flags and the saved
// login.
func (f *clientFlags) session() (cliLogin, string, error) {
	dir, err := f.stateDir()
	if err != nil {
		return cliLogin{}, "", err
	}
	var l cliLogin
	raw, err := os.ReadFile(filepath.Join(dir, "login.json"))
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &l); err != nil {
			return cliLogin{}, "", fmt.Errorf("read %s: %w", filepath.Join(dir, "login.json"), err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return cliLogin{}, "", err
	}
	if f.url != "" {
		l.URL = f.url
	}
	if l.URL == "" {
		l.URL = defaultClientURL
	}
	if f.token != "" {
		l.Token = f.token
		l.UserID = tokenSubject(f.token)
	}
	if l.Token == "" {
		return cliLogin{}, "", errors.New("not logged in: run inboxd login --url URL --user ID (or give --token)")
	}
	return l, dir, nil
}

// tokenSubject reads the sub claim of a JWT without verifying it (only to
// name the state files; the gateway verifies). 0 when unreadable.
func tokenSubject(tok string) int64 {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return 0
	}
	raw, err := decodeSegment(parts[1])
	if err != nil {
		return 0
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(raw, &claims) != nil {
		return 0
	}
	id, _ := strconv.ParseInt(claims.Sub, 10, 64)
	return id
}

func decodeSegment(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// userDir is the state directory of one user's client files.
func userDir(dir string, l cliLogin) string {
	name := "user-" + strconv.FormatInt(l.UserID, 10)
	if l.UserID == 0 {
		name = "user-unknown"
	}
	return filepath.Join(dir, name)
}

func (f *clientFlags) logger() (*slog.Logger, error) { return config.Logger(f.logLevel, f.logFormat) }

// printJSON writes v as one line.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func runLogin(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("login", flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	user := fs.Int64("user", 0, "user id to log in as (dev mode: the gateway's POST /v1/dev/token)")
	fs.Usage = config.Usage(fs, "inboxd login: get a token (dev mode) or store one (--token), for send, tail and conversations")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	dir, err := f.stateDir()
	if err != nil {
		return err
	}
	l := cliLogin{URL: f.url, UserID: *user, Token: f.token, Saved: time.Now().UTC()}
	if l.URL == "" {
		l.URL = defaultClientURL
	}
	if l.Token == "" {
		if l.UserID <= 0 {
			return errors.New("give --user ID (dev mode) or --token TOKEN")
		}
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if l.Token, err = client.DevToken(tctx, nil, l.URL, l.UserID); err != nil {
			return fmt.Errorf("dev token from %s: %w", l.URL, err)
		}
	} else if sub := tokenSubject(l.Token); sub != 0 {
		l.UserID = sub
	}
	raw, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(dir, "login.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if f.jsonOut {
		return printJSON(os.Stdout, map[string]any{"url": l.URL, "user_id": l.UserID, "login": path})
	}
	fmt.Printf("logged in to %s as user %d (saved in %s)\n", l.URL, l.UserID, path)
	return nil
}

func runSend(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	conv := fs.Int64("conversation", 0, "conversation id to send to")
	replyTo := fs.Int64("reply-to", 0, "seq of the message this one answers")
	mention := fs.String("mention", "", "comma-separated user ids the message mentions (members of the conversation)")
	mentionAll := fs.Bool("mention-all", false, "mention every member (@all; small conversations only)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the seq; an unsent message stays queued for the next inboxd send")
	fs.Usage = config.Usage(fs, "inboxd send --conversation ID [--reply-to SEQ] [--mention IDS] TEXT...: send a message (TEXT - reads stdin), print its seq")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if *conv <= 0 {
		return errors.New("give --conversation ID")
	}
	text := strings.Join(fs.Args(), " ")
	if text == "-" {
		raw, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		text = strings.TrimRight(string(raw), "\n")
	}
	if text == "" {
		return errors.New("nothing to send: give the text as arguments (or - for stdin)")
	}
	// The outbox file is the send command's own (tail keeps the cursor in
	// another file, so both can run at once).
	l, log, store, err := f.open("send.json")
	if err != nil {
		return err
	}
	defer store.Close()
	c, err := client.New(client.Config{BaseURL: l.URL, Token: l.Token, Store: store, Logger: log,
		DisableSync: true, StartupJitter: -1, Transport: client.TransportPolling})
	if err != nil {
		return err
	}
	mentions, err := parseUsers([]string{*mention})
	if err != nil {
		return fmt.Errorf("--mention: %w", err)
	}
	id, err := c.SendWith(ctx, *conv, text, client.SendOptions{ReplyTo: *replyTo, Mentions: mentions, MentionAll: *mentionAll})
	if err != nil {
		return err
	}
	// Sends left over by an interrupted earlier run go first.
	pending := c.Outbox()
	rctx, cancel := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(rctx) }()
	defer func() {
		cancel()
		<-runErr
	}()
	wctx, wcancel := context.WithTimeout(ctx, *timeout)
	defer wcancel()
	var failed error
	for _, it := range pending {
		res, err := waitSent(wctx, c, runErr, it.MsgID)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("msg_id %s not sent within %v; it stays queued in %s for the next inboxd send", it.MsgID, *timeout, store.Path())
			}
			return err
		}
		if err := printSendResult(f.jsonOut, res); err != nil {
			return err
		}
		if res.Err != nil && res.MsgID == id {
			failed = res.Err
		}
	}
	if failed != nil {
		return exitCode(1)
	}
	return nil
}

// waitSent waits for a send while watching Run (a permanent error ends it).
func waitSent(ctx context.Context, c *client.Client, runErr chan error, msgID string) (client.SendResult, error) {
	done := make(chan struct{})
	var res client.SendResult
	var err error
	go func() {
		defer close(done)
		res, err = c.WaitSent(ctx, msgID)
	}()
	select {
	case <-done:
		return res, err
	case rerr := <-runErr:
		runErr <- rerr
		<-done
		if rerr == nil {
			rerr = ctx.Err()
		}
		return res, rerr
	}
}

func printSendResult(jsonOut bool, r client.SendResult) error {
	if jsonOut {
		out := map[string]any{"msg_id": r.MsgID, "conversation_id": r.ConversationID}
		if r.Message != nil {
			out["seq"] = r.Message.Seq
		}
		if r.Err != nil {
			out["error"] = r.Err.Error()
		}
		return printJSON(os.Stdout, out)
	}
	if r.Err != nil {
		fmt.Fprintf(os.Stderr, "refused: conversation %d, msg_id %s: %v\n", r.ConversationID, r.MsgID, r.Err)
		return nil
	}
	fmt.Printf("sent to conversation %d as seq %d (msg_id %s)\n", r.ConversationID, r.Message.Seq, r.MsgID)
	return nil
}

func runTail(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	once := fs.Bool("once", false, "catch up to the head (with --notifications: print those kept) and exit instead of following")
	transport := fs.String("transport", "auto", "auto (WebSocket, long-polling fallback), websocket or polling")
	notifications := fs.Bool("notifications", false, "print instead the push notifications inboxd dev's own webhook receiver got (dev only; no login needed)")
	notifyUser := fs.Int64("for-user", 0, "with --notifications: only those to this user (default everyone)")
	fs.Usage = config.Usage(fs, "inboxd tail: print the inbox live, resuming from the saved cursor (--notifications: dev's push notifications)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if *notifications {
		return tailNotifications(ctx, &f, *notifyUser, *once)
	}
	var tr client.Transport
	switch *transport {
	case "auto":
		tr = client.TransportAuto
	case "websocket":
		tr = client.TransportWebSocket
	case "polling":
		tr = client.TransportPolling
	default:
		return fmt.Errorf("--transport %q: want auto, websocket or polling", *transport)
	}
	l, log, store, err := f.open("tail.json")
	if err != nil {
		return err
	}
	defer store.Close()
	p := &tailPrinter{json: f.jsonOut, out: os.Stdout, titles: map[int64]string{}, known: map[[2]int64]client.Message{}}
	h := client.Handler{
		OnEntry:  p.entry,
		OnUpdate: p.update,
		OnTooLong: func(_ context.Context, t client.TooLong) error {
			return p.tooLong(t)
		},
		OnConversations: func(_ context.Context, recs []client.Record) error {
			for _, r := range recs {
				p.titles[r.ConversationID] = r.Title
			}
			return nil
		},
	}
	if !f.jsonOut && !*once {
		tailLive(&h)
	}
	c, err := client.New(client.Config{BaseURL: l.URL, Token: l.Token, Store: store, Logger: log, Handler: h,
		Transport: tr, StartupJitter: -1})
	if err != nil {
		return err
	}
	// Titles for the readable output; the list is also what too_long reads.
	if recs, err := c.Conversations(ctx); err == nil {
		for _, r := range recs {
			p.titles[r.ConversationID] = r.Title
		}
	} else if client.IsPermanent(err) || isClientRefusal(err) {
		return err
	}
	if *once {
		return c.Sync(ctx)
	}
	return c.Run(ctx)
}

// tailLive adds to h what a followed tail prints on stderr beside the
// entries: the connection, others' typing, presence and receipts, and the
// totals (they are not inbox entries).
func tailLive(h *client.Handler) {
	h.OnStatus = func(s client.Status) {
		switch s.State {
		case client.StateConnected:
			fmt.Fprintf(os.Stderr, "-- connected (%s)\n", s.Transport)
		case client.StateWaiting, client.StateCircuitOpen:
			fmt.Fprintf(os.Stderr, "-- %s, retrying in %v: %v\n", s.State, time.Until(s.RetryAt).Round(time.Millisecond), s.Err)
		}
	}
	h.OnTyping = func(e client.TypingEvent) {
		fmt.Fprintf(os.Stderr, "-- %s\n", typingLine("conv "+strconv.FormatInt(e.ConversationID, 10), e))
	}
	h.OnPresence = func(e client.PresenceEvent) { fmt.Fprintf(os.Stderr, "-- %s\n", presenceLine(e)) }
	h.OnReceipt = func(r client.Receipt) {
		fmt.Fprintf(os.Stderr, "-- user %d read conv %d up to #%d\n", r.UserID, r.ConversationID, r.ReadSeq)
	}
	h.OnCounts = func(n client.Counts) {
		fmt.Fprintf(os.Stderr, "-- %d unread, %d mentions\n", n.UnreadTotal, n.MentionTotal)
	}
}

func isClientRefusal(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && !ae.Temporary()
}

// tailPrinter prints entries for people or as JSON lines. As JSON, every
// entry is printed as the protocol has it (update entries too); as text,
// the changes of a message are printed when they are news (OnUpdate), as
// what changed since the state this run printed.
type tailPrinter struct {
	json   bool
	out    io.Writer
	titles map[int64]string
	known  map[[2]int64]client.Message // the messages printed by this run, as printed
}

func (p *tailPrinter) conv(cid int64) string {
	conv := "conv " + strconv.FormatInt(cid, 10)
	if t := p.titles[cid]; t != "" {
		conv += " (" + t + ")"
	}
	return conv
}

func (p *tailPrinter) entry(_ context.Context, e client.Entry) error {
	if e.Record != nil {
		p.titles[e.ConversationID] = e.Record.Title
	}
	if p.json {
		return printJSON(p.out, e)
	}
	conv := p.conv(e.ConversationID)
	switch {
	case e.Kind == client.KindUpdate:
		return nil // printed by update when it is news
	case e.Message != nil:
		p.known[[2]int64{e.ConversationID, e.Message.Seq}] = *e.Message
		_, err := fmt.Fprintln(p.out, formatMessage(conv, e.Message))
		return err
	case e.Record != nil:
		r := e.Record
		var flags []string
		for _, fl := range []struct {
			on   bool
			name string
		}{{r.Pinned, "pinned"}, {r.Muted, "muted"}, {r.Removed, "removed"}} {
			if fl.on {
				flags = append(flags, fl.name)
			}
		}
		line := fmt.Sprintf("         %s  record: read up to #%d of #%d", conv, r.ReadSeq, r.LastSeq)
		if len(flags) > 0 {
			line += ", " + strings.Join(flags, ", ")
		}
		_, err := fmt.Fprintln(p.out, line)
		return err
	}
	return nil
}

// update prints a message's change: "#12 edited: …", "#12 deleted",
// "#12 reactions: [👍 2]" (both parts when the text and the reactions
// changed).
func (p *tailPrinter) update(_ context.Context, m client.Message) error {
	if p.json {
		return nil // the update entry was printed as it is
	}
	_, err := fmt.Fprintln(p.out, updateLine(p.conv(m.ConversationID), p.known[[2]int64{m.ConversationID, m.Seq}], m))
	p.known[[2]int64{m.ConversationID, m.Seq}] = m
	return err
}

// updateLine says what changed from prev to m. When prev is not known
// (zero: this run did not print the message), it says what m is now.
func updateLine(conv string, prev, m client.Message) string {
	head := fmt.Sprintf("         %s #%d ", conv, m.Seq)
	switch {
	case m.Deleted:
		return head + "deleted"
	case prev.Seq == 0:
		return head + "changed: " + textState(&m)
	}
	var parts []string
	if m.Text() != prev.Text() {
		parts = append(parts, "edited: "+m.Text())
	}
	if formatReactions(m.Reactions) != formatReactions(prev.Reactions) || len(parts) == 0 {
		parts = append(parts, "reactions: "+formatReactions(m.Reactions))
	}
	return head + strings.Join(parts, "; ")
}

func (p *tailPrinter) tooLong(t client.TooLong) error {
	for _, r := range t.Conversations {
		p.titles[r.ConversationID] = r.Title
	}
	if p.json {
		return printJSON(p.out, map[string]any{"too_long": map[string]any{"epoch": t.Epoch, "head": t.Head, "previous_epoch": t.PreviousEpoch,
			"previous_cursor": t.PreviousCursor, "conversations": len(t.Conversations), "holes": t.NewHoles}})
	}
	_, err := fmt.Fprintln(p.out, tooLongLine(t))
	return err
}

// tooLongLine says what a too-long answer means for this user: the
// server's inbox was rebuilt (a new epoch: nothing was lost, the numbering
// restarted), or more happened since the last run than the server keeps.
func tooLongLine(t client.TooLong) string {
	loads := fmt.Sprintf("%d conversations have older history to load (inboxd history)", len(t.NewHoles))
	if t.PreviousEpoch != 0 && t.PreviousEpoch != t.Epoch {
		return fmt.Sprintf("-- the server rebuilt its inboxes (epoch %d -> %d, e.g. after inboxd replay): nothing was lost; "+
			"your inbox is numbered afresh and continues after #%d; %s", t.PreviousEpoch, t.Epoch, t.Head, loads)
	}
	if t.PreviousCursor >= t.Head {
		return fmt.Sprintf("-- the server no longer keeps your inbox position #%d (head #%d): the conversation list was reloaded; %s",
			t.PreviousCursor, t.Head, loads)
	}
	return fmt.Sprintf("-- more than the server keeps happened since the last run: skipped inbox #%d..#%d; %s",
		t.PreviousCursor+1, t.Head, loads)
}
