package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/internal/config"
)

// The commands of typing and presence: your settings, others' presence.
// (tail prints the typing and presence of others as it follows.)

// runSettings prints your settings, after changing the ones given.
func runSettings(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("settings", flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	receipts := fs.Bool("hide-receipts", false, "hide your read positions from other members (give =true or =false)")
	presence := fs.Bool("hide-presence", false, "appear offline, without last seen, to others (give =true or =false)")
	notify := fs.Bool("notifications", true, "get push notifications while not connected (give =true or =false)")
	fs.Usage = config.Usage(fs, "inboxd settings [--hide-receipts=BOOL] [--hide-presence=BOOL] [--notifications=BOOL]: print your settings, after changing the ones given")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	var ch client.SettingsChange
	if config.Given(fs, "hide-receipts") {
		ch.HideReceipts = receipts
	}
	if config.Given(fs, "hide-presence") {
		ch.HidePresence = presence
	}
	if config.Given(fs, "notifications") {
		ch.Notifications = notify
	}
	var s client.Settings
	if ch.HideReceipts == nil && ch.HidePresence == nil && ch.Notifications == nil {
		s, err = c.Settings(ctx)
	} else {
		s, err = c.SetSettings(ctx, ch)
	}
	if err != nil {
		return err
	}
	if f.jsonOut {
		return printJSON(os.Stdout, s)
	}
	fmt.Printf("hide_receipts %v\nhide_presence %v\nnotifications %v\n", s.HideReceipts, s.HidePresence, s.Notifications)
	return nil
}

// runPresence prints the presence of the users given that you may see
// (you, and the users you share a conversation with).
func runPresence(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("presence", flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	fs.Usage = config.Usage(fs, "inboxd presence USER...: who of these users is online (those you share a conversation with; others are not shown)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	users, err := parseUsers(fs.Args())
	if err != nil {
		return err
	}
	if len(users) == 0 {
		return fmt.Errorf("give user ids")
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	ps, err := c.Presence(ctx, users...)
	if err != nil {
		return err
	}
	if f.jsonOut {
		return printJSON(os.Stdout, ps)
	}
	for _, p := range ps {
		fmt.Println(presenceLine(p))
	}
	return nil
}

// presenceLine is a presence as the commands print it.
func presenceLine(p client.Presence) string {
	switch {
	case p.Online:
		return fmt.Sprintf("user %d online", p.UserID)
	case p.LastSeen != nil:
		return fmt.Sprintf("user %d offline, last seen %s", p.UserID, p.LastSeen.Local().Format(time.DateTime))
	}
	return fmt.Sprintf("user %d offline", p.UserID)
}

// typingLine is a typing event as tail prints it.
func typingLine(conv string, e client.TypingEvent) string {
	if e.Stop {
		return fmt.Sprintf("user %d stopped typing in %s", e.UserID, conv)
	}
	return fmt.Sprintf("user %d is typing in %s", e.UserID, conv)
}
