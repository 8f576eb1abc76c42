// Command backend is a product's back-end service using inboxd's server
// API (docs/protocol.md, "Server API") with an API key: when a customer
// opens a support ticket it creates the conversation of the customer and
// an agent, posts a notice from the "Support" system sender, pins the
// conversation for the customer, and prints the conversation's state.
//
//	inboxd apikey create --name support-desk --scopes conversations,messages,records,read
//	INBOXD_API_KEY=ik_... go run ./examples/backend -url http://127.0.0.1:8080 -ticket 7 -customer 1 -agent 2
//
// Every write carries an Idempotency-Key derived from the ticket, so the
// program can be run again after a failure, or twice, and the ticket
// still has one conversation and one notice.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv("INBOXD_API_KEY"), os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "backend:", err)
		}
		os.Exit(1)
	}
}

// run opens ticket -ticket for -customer with -agent and prints what it did.
func run(ctx context.Context, args []string, key string, out io.Writer) error {
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080", "the gateway")
	ticket := fs.Int64("ticket", 0, "the ticket number (the idempotency of every call)")
	customer := fs.Int64("customer", 0, "the customer's user id")
	agent := fs.Int64("agent", 0, "the agent's user id")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ticket <= 0 || *customer <= 0 || *agent <= 0 {
		return errors.New("give -ticket, -customer and -agent (positive)")
	}
	if !strings.HasPrefix(key, "ik_") {
		return errors.New("set INBOXD_API_KEY to a key from `inboxd apikey create`")
	}
	c := &server{url: strings.TrimRight(*url, "/"), key: key, hc: &http.Client{Timeout: 30 * time.Second}}
	idem := func(step string) string { return fmt.Sprintf("ticket-%d-%s", *ticket, step) }

	var created struct {
		ConversationID int64 `json:"conversation_id"`
	}
	if err := c.do(ctx, "POST", "/v1/server/conversations", idem("create"), map[string]any{
		"title": fmt.Sprintf("Ticket #%d", *ticket), "members": []int64{*customer, *agent}}, &created); err != nil {
		return err
	}
	cid := created.ConversationID
	var msg struct {
		Seq        int64  `json:"seq"`
		SenderName string `json:"sender_name"`
	}
	if err := c.do(ctx, "POST", fmt.Sprintf("/v1/server/conversations/%d/messages", cid), idem("notice"), map[string]any{
		"sender_name": "Support", "body": fmt.Sprintf("Ticket #%d is open; an agent will answer here.", *ticket)}, &msg); err != nil {
		return err
	}
	if err := c.do(ctx, "PATCH", fmt.Sprintf("/v1/server/users/%d/conversations/%d/record", *customer, cid), idem("pin"),
		map[string]any{"pinned": true}, nil); err != nil {
		return err
	}
	var state struct {
		LastSeq     int64  `json:"last_seq"`
		MemberCount int64  `json:"member_count"`
		Mode        string `json:"mode"`
	}
	if err := c.do(ctx, "GET", fmt.Sprintf("/v1/server/conversations/%d", cid), "", nil, &state); err != nil {
		return err
	}
	fmt.Fprintf(out, "ticket %d: conversation %d, notice from %s at seq %d, %d members, last seq %d, %s mode\n",
		*ticket, cid, msg.SenderName, msg.Seq, state.MemberCount, state.LastSeq, state.Mode)
	return nil
}

// server is a minimal client of the server API.
type server struct {
	url, key string
	hc       *http.Client
}

// do sends one call (with Idempotency-Key idem when not empty) and decodes
// a 2xx answer into out; any other answer is an error with the server's
// message. A 429 or 503 could be retried after Retry-After with the same
// idem; this example leaves that to its caller.
func (s *server) do(ctx context.Context, method, path, idem string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	res, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, bytes.TrimSpace(raw))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: answer %s: %w", method, path, raw, err)
	}
	return nil
}
