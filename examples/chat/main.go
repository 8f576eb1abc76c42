// Command chat is a small chat client on the Go SDK (package client): it
// logs in to a dev gateway (inboxd dev) as a user, sends each line read
// from stdin to one conversation, and prints the messages of that
// conversation as they arrive. When stdin ends it waits for its sends,
// catches up once and exits, so it can be scripted:
//
//	go run ./examples/chat -user 1 -with 2                # new conversation with user 2
//	go run ./examples/chat -user 2 -conversation 1        # join it from another terminal
//	echo hello | go run ./examples/chat -user 1 -conversation 1
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inboxd/inboxd/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "chat:", err)
		}
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	url          string
	user         int64
	with         []int64
	conversation int64
	title        string
}

func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.StringVar(&o.url, "url", "http://127.0.0.1:8080", "base URL of the gateway (inboxd dev)")
	fs.Int64Var(&o.user, "user", 0, "user id to log in as (dev tokens: any id)")
	with := fs.String("with", "", "start a conversation with these users (comma-separated ids)")
	fs.Int64Var(&o.conversation, "conversation", 0, "conversation to join (the user must be a member)")
	fs.StringVar(&o.title, "title", "chat", "title of a conversation started with -with")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, s := range strings.Split(*with, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return o, fmt.Errorf("-with: %w", err)
		}
		o.with = append(o.with, id)
	}
	switch {
	case o.user <= 0:
		return o, errors.New("-user is required")
	case (o.conversation == 0) == (len(o.with) == 0):
		return o, errors.New("give either -conversation or -with")
	}
	return o, nil
}

// run is the program: main without the process around it.
func run(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	// A dev gateway hands out a token for any user; a real app gets it
	// from its login and gives the client a TokenSource.
	token, err := client.DevToken(ctx, nil, o.url, o.user)
	if err != nil {
		return fmt.Errorf("log in: %w", err)
	}
	p := &printer{w: out}
	c, err := client.New(client.Config{
		BaseURL:       o.url,
		Token:         token,
		StartupJitter: -1, // one person at a keyboard, not a fleet started at once
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Handler: client.Handler{
			OnEntry: func(_ context.Context, e client.Entry) error {
				if e.Kind == client.KindMessage && e.ConversationID == o.conversation && e.Message.Kind == client.MessageText {
					p.printf("%d: %s\n", e.Message.SenderID, e.Message.Text())
				}
				return nil
			},
			OnSendResult: func(_ context.Context, r client.SendResult) {
				if r.Err != nil {
					p.printf("not sent: %v\n", r.Err)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	if o.conversation == 0 {
		// Before Run starts: OnEntry reads o.conversation.
		if o.conversation, err = c.CreateConversation(ctx, o.title, o.with...); err != nil {
			return fmt.Errorf("start a conversation: %w", err)
		}
		p.printf("conversation %d (others join with -conversation %d)\n", o.conversation, o.conversation)
	}

	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	var runErr error
	go func() {
		defer close(runDone)
		runErr = c.Run(runCtx) // nil when runCtx ends
	}()
	err = sendLines(ctx, c, o.conversation, in, runDone)
	if err == nil {
		// stdin ended: show what came meanwhile (our own messages too).
		err = c.Sync(ctx)
	}
	stopRun()
	<-runDone
	switch {
	case errors.Is(err, errRunEnded):
		return runErr
	case ctx.Err() != nil:
		return nil // interrupted
	case err == nil:
		return runErr
	}
	return err
}

// errRunEnded: Run stopped (a permanent error) while lines were read.
var errRunEnded = errors.New("the client stopped")

// sendLines sends each non-empty line of in, and once in ends waits for
// the sends to end. It stops early when ctx ends or Run does (runDone).
func sendLines(ctx context.Context, c *client.Client, cid int64, in io.Reader, runDone <-chan struct{}) error {
	lines := make(chan string)
	readErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
		readErr <- sc.Err()
	}()
	var ids []string
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-runDone:
			return errRunEnded
		case line, ok := <-lines:
			if !ok {
				if err := <-readErr; err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
				return waitSent(ctx, c, ids, runDone)
			}
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			id, err := c.Send(ctx, cid, line)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
	}
}

// waitSent waits until every send ended (sent or refused), for a minute at
// most: the gateway may be away.
func waitSent(ctx context.Context, c *client.Client, ids []string, runDone <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		select {
		case <-runDone: // nothing will be sent any more
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, id := range ids {
		if _, err := c.WaitSent(ctx, id); err != nil {
			select {
			case <-runDone:
				return errRunEnded
			default:
			}
			return fmt.Errorf("wait for the sends: %w", err)
		}
	}
	return nil
}

// printer serializes the output of the handlers and the main goroutine.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}
