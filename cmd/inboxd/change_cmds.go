package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/client"
)

// The commands that change a message after it was sent (edit, delete,
// react): one change each through the client package, which retries it
// with the same change_id while the failure is temporary, until --timeout.

// changeCommand parses the flags of a change command: the conversation
// ones, --seq, --timeout and the command's own.
func changeCommand(name, usage string, args []string, more func(fs *flag.FlagSet)) (*clientFlags, int64, int64, time.Duration, []string, error) {
	var seq int64
	var timeout time.Duration
	f, conv, rest, err := convCommand(name, usage, args, true, func(fs *flag.FlagSet) {
		fs.Int64Var(&seq, "seq", 0, "seq of the message")
		fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to retry a change the gateway cannot take now")
		if more != nil {
			more(fs)
		}
	})
	if err != nil {
		return nil, 0, 0, 0, nil, err
	}
	if seq <= 0 {
		return nil, 0, 0, 0, nil, errors.New("give --seq SEQ")
	}
	return f, conv, seq, timeout, rest, nil
}

func runEdit(ctx context.Context, args []string) error {
	f, conv, seq, timeout, rest, err := changeCommand("edit",
		"inboxd edit --conversation ID --seq SEQ TEXT...: replace the text of a message you sent (TEXT - reads stdin)", args, nil)
	if err != nil {
		return err
	}
	text, err := textArg(rest)
	if err != nil {
		return err
	}
	return applyChange(ctx, f, timeout, client.Change{Kind: client.ChangeEdit, ConversationID: conv, Seq: seq, Body: text})
}

func runDelete(ctx context.Context, args []string) error {
	f, conv, seq, timeout, _, err := changeCommand("delete",
		"inboxd delete --conversation ID --seq SEQ: delete a message you sent (or any, in a conversation you created)", args, nil)
	if err != nil {
		return err
	}
	return applyChange(ctx, f, timeout, client.Change{Kind: client.ChangeDelete, ConversationID: conv, Seq: seq})
}

func runReact(ctx context.Context, args []string) error {
	var off bool
	f, conv, seq, timeout, rest, err := changeCommand("react",
		"inboxd react --conversation ID --seq SEQ EMOJI: react to a message (one reaction per user; --off removes yours)", args,
		func(fs *flag.FlagSet) { fs.BoolVar(&off, "off", false, "remove your reaction instead") })
	if err != nil {
		return err
	}
	ch := client.Change{Kind: client.ChangeUnreact, ConversationID: conv, Seq: seq}
	switch {
	case off && len(rest) > 0:
		return errors.New("react --off takes no emoji")
	case !off && len(rest) != 1:
		return errors.New("give one emoji: inboxd react --conversation ID --seq SEQ 👍")
	case !off:
		ch.Kind, ch.Emoji = client.ChangeReact, rest[0]
	}
	return applyChange(ctx, f, timeout, ch)
}

// textArg is the text of the arguments; "-" reads stdin.
func textArg(args []string) (string, error) {
	text := strings.Join(args, " ")
	if text == "-" {
		raw, err := io.ReadAll(os.Stdin)
		if err != nil {
			return "", err
		}
		text = strings.TrimRight(string(raw), "\n")
	}
	if text == "" {
		return "", errors.New("no text: give it as arguments (or - for stdin)")
	}
	return text, nil
}

// applyChange makes the change and prints the message after it (or that
// it is pending).
func applyChange(ctx context.Context, f *clientFlags, timeout time.Duration, ch client.Change) error {
	c, _, err := f.client()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := c.ApplyChange(cctx, ch)
	if err != nil {
		return err
	}
	if f.jsonOut {
		if res.Pending {
			return printJSON(os.Stdout, map[string]any{"change_id": res.Change.ChangeID, "conversation_id": ch.ConversationID,
				"seq": ch.Seq, "status": "pending"})
		}
		return printJSON(os.Stdout, res.Message)
	}
	if res.Pending {
		fmt.Printf("%s of #%d in conversation %d is pending (change_id %s): it applies in the log's order; inboxd tail shows it\n",
			ch.Kind, ch.Seq, ch.ConversationID, res.Change.ChangeID)
		return nil
	}
	fmt.Println(formatMessage("conv "+strconv.FormatInt(ch.ConversationID, 10), res.Message))
	return nil
}

func runReport(ctx context.Context, args []string) error {
	var reason string
	f, conv, seq, timeout, rest, err := changeCommand("report",
		"inboxd report --conversation ID --seq SEQ --reason REASON [NOTE...]: report someone else's message to the moderators", args,
		func(fs *flag.FlagSet) {
			fs.StringVar(&reason, "reason", "", "spam, harassment, hate, violence, sexual, self_harm, illegal or other")
		})
	if err != nil {
		return err
	}
	if reason == "" {
		return errors.New("give --reason (spam, harassment, hate, violence, sexual, self_harm, illegal, other)")
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := c.ReportMessage(cctx, conv, seq, client.ReportOptions{Reason: reason, Note: strings.Join(rest, " ")})
	if err != nil {
		return err
	}
	if f.jsonOut {
		if res.Pending {
			return printJSON(os.Stdout, map[string]any{"report_id": res.ReportID, "conversation_id": conv, "seq": seq, "status": "pending"})
		}
		return printJSON(os.Stdout, res.Report)
	}
	if res.Pending {
		fmt.Printf("report %s of #%d in conversation %d is pending: it is taken in the log's order\n", res.ReportID, seq, conv)
		return nil
	}
	fmt.Printf("reported #%d of conversation %d (%s): report %s\n", seq, conv, reason, res.ReportID)
	return nil
}
