package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/inboxd/inboxd/client"
)

// The examples talk to a dev gateway (inboxd dev) at gatewayURL(), which
// hands out tokens for any user id; yours come from your own login.

// A client of one user sends a message and waits for its seq. Send only
// queues the message (and saves the queue); Run sends it.
func ExampleClient_Send() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	token, err := client.DevToken(ctx, nil, gatewayURL(), 1001)
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New(client.Config{BaseURL: gatewayURL(), Token: token})
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()

	cid, err := c.CreateConversation(ctx, "notes to self")
	if err != nil {
		log.Fatal(err)
	}
	id, err := c.Send(ctx, cid, "buy milk")
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.WaitSent(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	if res.Err != nil {
		log.Fatal(res.Err) // refused for good: 403, 413, …
	}
	// Seq 1 of a conversation is its creation, a system message.
	fmt.Printf("%q has seq %d\n", res.Message.Text(), res.Message.Seq)

	cancel()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	// Output:
	// "buy milk" has seq 2
}

// A sync loop: Run keeps a device in sync and hands every inbox entry to
// Handler.OnEntry, in order, once. The device keeps its state (position,
// outbox) in a FileStore, so that a restarted app goes on where it stopped
// instead of getting everything again.
func ExampleClient_Run() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "inbox-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	const aliceID, bobID = 2001, 2002

	// Alice writes from a client that runs all along.
	aliceToken, err := client.DevToken(ctx, nil, gatewayURL(), aliceID)
	if err != nil {
		log.Fatal(err)
	}
	alice, err := client.New(client.Config{BaseURL: gatewayURL(), Token: aliceToken})
	if err != nil {
		log.Fatal(err)
	}
	aliceRan := make(chan error, 1)
	go func() { aliceRan <- alice.Run(ctx) }()

	bobToken, err := client.DevToken(ctx, nil, gatewayURL(), bobID)
	if err != nil {
		log.Fatal(err)
	}
	var cid int64 // set before a device runs
	// bobDevice starts Bob's app on its state file. It shows the text
	// messages of conversation cid; its run ends once the message last came.
	bobDevice := func(last string) (run func() error, quit func()) {
		store, err := client.OpenFileStore(filepath.Join(dir, "bob.json"))
		if err != nil {
			log.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		bob, err := client.New(client.Config{BaseURL: gatewayURL(), Token: bobToken, Store: store,
			Handler: client.Handler{OnEntry: func(_ context.Context, e client.Entry) error {
				if e.Kind == client.KindMessage && e.ConversationID == cid && e.Message.Kind == client.MessageText {
					fmt.Printf("bob got %q\n", e.Message.Text())
					if e.Message.Text() == last {
						stop()
					}
				}
				return nil // an error would stop Run; the entry would come again
			}}})
		if err != nil {
			log.Fatal(err)
		}
		run = func() error { return bob.Run(runCtx) } // nil once runCtx ends
		return run, func() { stop(); store.Close() }
	}

	if cid, err = alice.CreateConversation(ctx, "lunch", bobID); err != nil {
		log.Fatal(err)
	}
	for _, text := range []string{"one", "two"} {
		if _, err := alice.Send(ctx, cid, text); err != nil {
			log.Fatal(err)
		}
	}
	run, quit := bobDevice("two")
	if err := run(); err != nil {
		log.Fatal(err)
	}
	quit()
	fmt.Println("bob's device is off")

	id, err := alice.Send(ctx, cid, "three")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := alice.WaitSent(ctx, id); err != nil {
		log.Fatal(err)
	}
	// Restarted, the device reads its position from the file: it gets only
	// what came since.
	run, quit = bobDevice("three")
	if err := run(); err != nil {
		log.Fatal(err)
	}
	quit()

	cancel()
	if err := <-aliceRan; err != nil {
		log.Fatal(err)
	}
	// Output:
	// bob got "one"
	// bob got "two"
	// bob's device is off
	// bob got "three"
}

// A device that was offline for longer than the server keeps entries for
// (500 entries by default; 20 on the examples' gateway) gets a too_long:
// the inbox jumps to its head, Handler.OnTooLong learns the history holes
// this opened, and Client.Backfill fills them a page at a time, newest
// first, as a chat view scrolling up would.
func ExampleHandler_tooLong() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const carolID, daveID = 3001, 3002

	// Carol writes 30 notes while Dave's device is off.
	carolToken, err := client.DevToken(ctx, nil, gatewayURL(), carolID)
	if err != nil {
		log.Fatal(err)
	}
	carol, err := client.New(client.Config{BaseURL: gatewayURL(), Token: carolToken})
	if err != nil {
		log.Fatal(err)
	}
	carolCtx, carolDone := context.WithCancel(ctx)
	carolRan := make(chan error, 1)
	go func() { carolRan <- carol.Run(carolCtx) }()
	cid, err := carol.CreateConversation(ctx, "release notes", daveID)
	if err != nil {
		log.Fatal(err)
	}
	var ids []string
	for i := 1; i <= 30; i++ {
		id, err := carol.Send(ctx, cid, fmt.Sprintf("note %d", i))
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if _, err := carol.WaitSent(ctx, id); err != nil {
			log.Fatal(err)
		}
	}
	carolDone()
	if err := <-carolRan; err != nil {
		log.Fatal(err)
	}

	// Dave's device comes back.
	daveToken, err := client.DevToken(ctx, nil, gatewayURL(), daveID)
	if err != nil {
		log.Fatal(err)
	}
	dave, err := client.New(client.Config{BaseURL: gatewayURL(), Token: daveToken, BackfillPage: 20,
		Handler: client.Handler{
			OnTooLong: func(_ context.Context, t client.TooLong) error {
				// An app marks the older history of these conversations
				// as not loaded.
				fmt.Println("too long; not loaded:", t.NewHoles[cid])
				return nil
			},
		}})
	if err != nil {
		log.Fatal(err)
	}
	if err := dave.Sync(ctx); err != nil { // Run would do the same
		log.Fatal(err)
	}
	for {
		page, err := dave.Backfill(ctx, cid)
		if err != nil {
			log.Fatal(err)
		}
		oldest, newest := page.Messages[0], page.Messages[len(page.Messages)-1]
		fmt.Printf("loaded seq %d to %d (%q), not loaded: %v\n", oldest.Seq, newest.Seq, newest.Text(), page.Remaining)
		if len(page.Remaining) == 0 {
			break
		}
	}
	// Output:
	// too long; not loaded: [{1 31}]
	// loaded seq 12 to 31 ("note 30"), not loaded: [{1 11}]
	// loaded seq 1 to 11 ("note 10"), not loaded: []
}

// A message's life after it is sent: its sender edits it, a member reacts
// to it. Each change is one request (Client.Edit, React, Delete, Unreact)
// that answers the message after the change; the other devices get it as
// an update entry, handed to Handler.OnUpdate once per new version.
func ExampleClient_Edit() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const erinID, frankID = 4001, 4002
	erinToken, err := client.DevToken(ctx, nil, gatewayURL(), erinID)
	if err != nil {
		log.Fatal(err)
	}
	frankToken, err := client.DevToken(ctx, nil, gatewayURL(), frankID)
	if err != nil {
		log.Fatal(err)
	}
	erin, err := client.New(client.Config{BaseURL: gatewayURL(), Token: erinToken})
	if err != nil {
		log.Fatal(err)
	}
	frank, err := client.New(client.Config{BaseURL: gatewayURL(), Token: frankToken,
		Handler: client.Handler{
			OnEntry: func(_ context.Context, e client.Entry) error {
				if e.Kind == client.KindMessage && e.Message.Kind == client.MessageText {
					fmt.Printf("frank sees #%d %q\n", e.Message.Seq, e.Message.Text())
				}
				return nil // update entries come to OnUpdate when they are news
			},
			OnUpdate: func(_ context.Context, m client.Message) error {
				fmt.Printf("frank sees #%d changed to %q (version %d, edited %v, reactions %v)\n",
					m.Seq, m.Text(), m.Version, m.EditedAt != nil, m.Reactions)
				return nil
			},
		}})
	if err != nil {
		log.Fatal(err)
	}

	cid, err := erin.CreateConversation(ctx, "lunch", frankID)
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { ran <- erin.Run(runCtx) }()
	id, err := erin.Send(ctx, cid, "lunch at 1?")
	if err != nil {
		log.Fatal(err)
	}
	sent, err := erin.WaitSent(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	seq := sent.Message.Seq
	if err := frank.Sync(ctx); err != nil { // Run would do the same, live
		log.Fatal(err)
	}

	edit, err := erin.Edit(ctx, cid, seq, "lunch at 12:30?")
	if err != nil {
		log.Fatal(err) // an *APIError: 403 forbidden for someone else's message, …
	}
	fmt.Printf("erin edited #%d: %q, version %d\n", seq, edit.Message.Text(), edit.Message.Version)
	react, err := frank.React(ctx, cid, seq, "👍")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("frank reacted: %v, version %d\n", react.Message.Reactions, react.Message.Version)

	// Two update entries; read now, both carry the message as it is.
	if err := frank.Sync(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// frank sees #2 "lunch at 1?"
	// erin edited #2: "lunch at 12:30?", version 2
	// frank reacted: [{👍 1 true}], version 3
	// frank sees #2 changed to "lunch at 12:30?" (version 3, edited true, reactions [{👍 1 true}])
}
