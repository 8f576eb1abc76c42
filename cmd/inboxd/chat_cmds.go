package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/inboxd/inboxd/client"
	"github.com/inboxd/inboxd/internal/config"
)

// The conversation commands (conversations, create, members, history,
// read, pin, mute): one request each through the client package, a line of
// text or of JSON out. They share the login of inboxd login and its flags.

// client returns a client of the saved login (or of --url and --token) with
// no state file: these commands change the server, not a local inbox.
func (f *clientFlags) client() (*client.Client, cliLogin, error) {
	l, _, err := f.session()
	if err != nil {
		return nil, l, err
	}
	log, err := f.logger()
	if err != nil {
		return nil, l, err
	}
	c, err := client.New(client.Config{BaseURL: l.URL, Token: l.Token, Logger: log})
	return c, l, err
}

// parseUsers reads user ids given as arguments ("2 3" or "2,3").
func parseUsers(args []string) ([]int64, error) {
	var ids []int64
	for _, a := range args {
		for _, s := range strings.Split(a, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil || id <= 0 {
				return nil, fmt.Errorf("user id %q: want a positive number", s)
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// convCommand parses the flags every conversation command has (the client's
// and --conversation) plus the command's own, bound by more.
func convCommand(name, usage string, args []string, needConv bool, more func(fs *flag.FlagSet)) (*clientFlags, int64, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	conv := fs.Int64("conversation", 0, "conversation id")
	if more != nil {
		more(fs)
	}
	fs.Usage = config.Usage(fs, usage)
	if err := config.Parse(fs, args); err != nil {
		return nil, 0, nil, err
	}
	if needConv && *conv <= 0 {
		return nil, 0, nil, errors.New("give --conversation ID")
	}
	return &f, *conv, fs.Args(), nil
}

func runCreate(ctx context.Context, args []string) error {
	var title string
	f, _, rest, err := convCommand("create", "inboxd create [--title T] [USER...]: create a conversation with you and the users, print its id",
		args, false, func(fs *flag.FlagSet) { fs.StringVar(&title, "title", "", "title of the conversation") })
	if err != nil {
		return err
	}
	members, err := parseUsers(rest)
	if err != nil {
		return err
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	id, err := c.CreateConversation(ctx, title, members...)
	if err != nil {
		return err
	}
	if f.jsonOut {
		return printJSON(os.Stdout, map[string]any{"conversation_id": id})
	}
	fmt.Printf("created conversation %d\n", id)
	return nil
}

func runMembers(ctx context.Context, args []string) error {
	const usage = "inboxd members list|add|remove|role|ban|unban|mute|unmute|bans|mutes --conversation ID [--role ROLE] [--for DURATION] [USER...]: list a conversation's members, add or remove users, give them a role, ban or mute them (for a while, or until lifted), or list the bans and mutes"
	verb := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	var role string
	var span time.Duration
	f, conv, rest, err := convCommand(strings.TrimSpace("members "+verb), usage, args, verb != "", func(fs *flag.FlagSet) {
		fs.StringVar(&role, "role", "", "role: the role to give (owner, admin, moderator, member)")
		fs.DurationVar(&span, "for", 0, "ban, mute: how long it lasts (0: until lifted)")
	})
	if err != nil {
		return err
	}
	if verb == "" {
		return errors.New("members: give list, add, remove or role first (inboxd members list --conversation ID)")
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	switch verb {
	case "list":
		return listMembers(ctx, c, f.jsonOut, conv)
	case "bans", "mutes":
		return listSanctions(ctx, c, f.jsonOut, conv, verb)
	case "ban", "unban", "mute", "unmute":
		users, err := parseUsers(rest)
		if err != nil {
			return err
		}
		if len(users) == 0 {
			return fmt.Errorf("members %s: give the user ids", verb)
		}
		var until *time.Time
		if span > 0 {
			t := time.Now().Add(span)
			until = &t
		}
		for _, u := range users {
			switch verb {
			case "ban":
				err = c.Ban(ctx, conv, u, until)
			case "unban":
				err = c.Unban(ctx, conv, u)
			case "mute":
				err = c.Mute(ctx, conv, u, until)
			default:
				err = c.Unmute(ctx, conv, u)
			}
			if err != nil {
				return fmt.Errorf("%s user %d: %w", verb, u, err)
			}
			if f.jsonOut {
				out := map[string]any{"conversation_id": conv, "user_id": u, verb: true}
				if until != nil {
					out["until"] = until.UTC()
				}
				if err := printJSON(os.Stdout, out); err != nil {
					return err
				}
				continue
			}
			done := map[string]string{"ban": "banned", "unban": "unbanned", "mute": "muted", "unmute": "unmuted"}[verb]
			if until != nil {
				done += " until " + until.Format(time.RFC3339)
			}
			fmt.Printf("%s user %d: conversation %d\n", done, u, conv)
		}
		return nil
	case "add", "remove", "role":
		if verb == "role" && role == "" {
			return errors.New("members role: give --role (owner, admin, moderator, member)")
		}
		users, err := parseUsers(rest)
		if err != nil {
			return err
		}
		if len(users) == 0 {
			return fmt.Errorf("members %s: give the user ids", verb)
		}
		for _, u := range users {
			switch verb {
			case "add":
				err = c.AddMember(ctx, conv, u)
			case "remove":
				err = c.RemoveMember(ctx, conv, u)
			default:
				err = c.SetRole(ctx, conv, u, role)
			}
			if err != nil {
				return fmt.Errorf("%s user %d: %w", verb, u, err)
			}
			if f.jsonOut {
				out := map[string]any{"conversation_id": conv, "user_id": u, verb: true}
				if verb == "role" {
					out["role"] = role
				}
				if err := printJSON(os.Stdout, out); err != nil {
					return err
				}
				continue
			}
			if verb == "role" {
				fmt.Printf("user %d is %s: conversation %d\n", u, role, conv)
				continue
			}
			fmt.Printf("%s user %d: conversation %d\n", map[string]string{"add": "added", "remove": "removed"}[verb], u, conv)
		}
		return nil
	}
	return fmt.Errorf("members %q: want list, add, remove, role, ban, unban, mute, unmute, bans or mutes", verb)
}

// listSanctions prints the bans or mutes (what) that stand in conv.
func listSanctions(ctx context.Context, c *client.Client, jsonOut bool, conv int64, what string) error {
	list := c.Bans
	if what == "mutes" {
		list = c.Mutes
	}
	ss, err := list(ctx, conv)
	if err != nil {
		return err
	}
	if jsonOut {
		return printJSON(os.Stdout, map[string]any{"conversation_id": conv, what: ss})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tUNTIL\tBY\tAT")
	for _, s := range ss {
		until := "until lifted"
		if s.Until != nil {
			until = s.Until.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", s.UserID, until, s.By, s.At.Format(time.RFC3339))
	}
	return tw.Flush()
}

func runHistory(ctx context.Context, args []string) error {
	var before int64
	var limit int
	f, conv, _, err := convCommand("history", "inboxd history --conversation ID [--before SEQ] [--limit N]: print a conversation's messages, oldest first",
		args, true, func(fs *flag.FlagSet) {
			fs.Int64Var(&before, "before", 0, "print messages with a seq below this one (0: up to the newest)")
			fs.IntVar(&limit, "limit", 50, "how many messages at most (the server caps it)")
		})
	if err != nil {
		return err
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	msgs, more, err := c.History(ctx, conv, before, limit)
	if err != nil {
		return err
	}
	for i := range msgs {
		if f.jsonOut {
			if err := printJSON(os.Stdout, msgs[i]); err != nil {
				return err
			}
			continue
		}
		fmt.Println(formatMessage("conv "+strconv.FormatInt(conv, 10), &msgs[i]))
	}
	if more && !f.jsonOut && len(msgs) > 0 {
		fmt.Printf("-- older messages: inboxd history --conversation %d --before %d\n", conv, msgs[0].Seq)
	}
	return nil
}

func runRead(ctx context.Context, args []string) error {
	var seq int64
	f, conv, _, err := convCommand("read", "inboxd read --conversation ID [--seq SEQ]: mark the conversation read up to SEQ (default: its last message)",
		args, true, func(fs *flag.FlagSet) { fs.Int64Var(&seq, "seq", 0, "read up to this seq (0: the last one)") })
	if err != nil {
		return err
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	if seq == 0 {
		recs, err := c.Conversations(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.ConversationID == conv {
				seq = r.LastSeq
			}
		}
		if seq == 0 {
			return fmt.Errorf("conversation %d: not in your list, or no message yet", conv)
		}
	}
	if err := c.MarkRead(ctx, conv, seq); err != nil {
		return err
	}
	if f.jsonOut {
		return printJSON(os.Stdout, map[string]any{"conversation_id": conv, "read_seq": seq})
	}
	fmt.Printf("conversation %d read up to #%d\n", conv, seq)
	return nil
}

func runPin(ctx context.Context, args []string) error  { return setFlag(ctx, "pin", "pinned", args) }
func runMute(ctx context.Context, args []string) error { return setFlag(ctx, "mute", "muted", args) }

// setFlag sets or clears (--off) the pinned or muted flag of the user's
// record of a conversation.
func setFlag(ctx context.Context, name, state string, args []string) error {
	var off bool
	f, conv, _, err := convCommand(name, fmt.Sprintf("inboxd %s --conversation ID [--off]: %s the conversation in your list (--off: un%s it)", name, name, name),
		args, true, func(fs *flag.FlagSet) { fs.BoolVar(&off, "off", false, "clear the flag instead of setting it") })
	if err != nil {
		return err
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	on := !off
	if name == "pin" {
		err = c.SetRecord(ctx, conv, &on, nil)
	} else {
		err = c.SetRecord(ctx, conv, nil, &on)
	}
	if err != nil {
		return err
	}
	if f.jsonOut {
		return printJSON(os.Stdout, map[string]any{"conversation_id": conv, state: on})
	}
	if off {
		state = "not " + state
	}
	fmt.Printf("conversation %d is %s\n", conv, state)
	return nil
}

// formatMessage is a message as tail and history print it: "↩ #12" before
// the text of a reply, "(edited)", "(deleted)" and the reactions after it.
func formatMessage(conv string, m *client.Message) string {
	at := m.CreatedAt.Local().Format("15:04:05")
	if m.Kind == "system" {
		return fmt.Sprintf("%s %s #%d  * %s", at, conv, m.Seq, describeSystem(m.Body))
	}
	return fmt.Sprintf("%s %s #%d  user %d: %s", at, conv, m.Seq, m.SenderID, textState(m))
}

// textState is a text message's text with its markers.
func textState(m *client.Message) string {
	text := m.Text()
	switch {
	case m.Deleted:
		text = "(deleted)"
	case m.EditedAt != nil:
		text += " (edited)"
	}
	if m.ReplyTo != 0 {
		text = fmt.Sprintf("↩ #%d %s", m.ReplyTo, text)
	}
	if len(m.Reactions) > 0 {
		text += " " + formatReactions(m.Reactions)
	}
	return text
}

// formatReactions is "[👍 2, 🎉 1]", or "[]" for none.
func formatReactions(rs []client.Reaction) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s %d", r.Emoji, r.Count)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// describeSystem reads a system message's body (docs/protocol.md) as a
// sentence; a body it does not know is printed as it is.
func describeSystem(body json.RawMessage) string {
	var b struct {
		Event   string     `json:"event"`
		By      int64      `json:"by"`
		Title   string     `json:"title"`
		Members []int64    `json:"members"`
		UserID  int64      `json:"user_id"`
		Role    string     `json:"role"`
		Until   *time.Time `json:"until"`
		// conversation.updated: the settings that changed.
		Frozen   *bool `json:"frozen"`
		SlowMode *int  `json:"slow_mode"`
	}
	if json.Unmarshal(body, &b) != nil {
		return string(body)
	}
	switch b.Event {
	case "conversation.created":
		users := make([]string, len(b.Members))
		for i, m := range b.Members {
			users[i] = strconv.FormatInt(m, 10)
		}
		return fmt.Sprintf("user %d created %q with users %s", b.By, b.Title, strings.Join(users, ", "))
	case "member.added":
		return fmt.Sprintf("user %d added user %d", b.By, b.UserID)
	case "member.removed":
		if b.By == b.UserID {
			return fmt.Sprintf("user %d left", b.UserID)
		}
		return fmt.Sprintf("user %d removed user %d", b.By, b.UserID)
	case "member.role_set":
		return fmt.Sprintf("user %d made user %d %s", b.By, b.UserID, b.Role)
	case "member.banned", "member.unbanned", "member.muted", "member.unmuted":
		s := fmt.Sprintf("user %d %s user %d", b.By, strings.TrimPrefix(b.Event, "member."), b.UserID)
		if b.Until != nil {
			s += " until " + b.Until.Format(time.RFC3339)
		}
		return s
	case "conversation.updated":
		var what []string
		if b.Title != "" {
			what = append(what, fmt.Sprintf("renamed it %q", b.Title))
		}
		if b.Frozen != nil {
			what = append(what, map[bool]string{true: "froze it", false: "unfroze it"}[*b.Frozen])
		}
		if b.SlowMode != nil {
			what = append(what, fmt.Sprintf("set its slow mode to %d s", *b.SlowMode))
		}
		return fmt.Sprintf("user %d %s", b.By, strings.Join(what, ", "))
	}
	return string(body)
}

func listMembers(ctx context.Context, c *client.Client, jsonOut bool, conv int64) error {
	ms, err := c.Members(ctx, conv)
	if err != nil {
		return err
	}
	if jsonOut {
		for _, m := range ms {
			if err := printJSON(os.Stdout, m); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tJOINED AT\tROLE")
	for _, m := range ms {
		fmt.Fprintf(tw, "%d\t#%d\t%s\n", m.UserID, m.JoinedSeq, m.Role)
	}
	return tw.Flush()
}

func runConversations(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "update" {
		return updateConversation(ctx, args[1:])
	}
	fs := flag.NewFlagSet("conversations", flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	fs.Usage = config.Usage(fs, "inboxd conversations [update]: list your conversations, pinned first, then by activity (update: rename one, freeze it or set its slow mode)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	recs, err := c.Conversations(ctx)
	if err != nil {
		return err
	}
	if f.jsonOut {
		for _, r := range recs {
			if err := printJSON(os.Stdout, r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTITLE\tLAST\tUNREAD\tFLAGS\tLAST MESSAGE")
	for _, r := range recs {
		var flags []string
		if r.Pinned {
			flags = append(flags, "pinned")
		}
		if r.Muted {
			flags = append(flags, "muted")
		}
		if r.Removed {
			flags = append(flags, "removed")
		}
		if r.Frozen {
			flags = append(flags, "frozen")
		}
		if r.SlowMode > 0 {
			flags = append(flags, fmt.Sprintf("slow %ds", r.SlowMode))
		}
		last := ""
		if r.LastMessage != nil {
			last = r.LastMessage.Text()
			if r.LastMessage.Deleted {
				last = "(deleted)"
			}
			if r.LastMessage.Kind == "system" {
				last = describeSystem(r.LastMessage.Body)
			}
			if r.LastMessage.Kind == "text" {
				last = "user " + strconv.FormatInt(r.LastMessage.SenderID, 10) + ": " + last
			}
			if len([]rune(last)) > 50 {
				last = string([]rune(last)[:49]) + "…"
			}
		}
		unread := strconv.FormatInt(r.UnreadCount, 10)
		if r.MentionCount > 0 {
			unread += fmt.Sprintf(" (@%d)", r.MentionCount)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", r.ConversationID, r.Title, r.LastSeq, unread,
			strings.Join(flags, ","), last)
	}
	return tw.Flush()
}

// updateConversation is inboxd conversations update: it renames a
// conversation, freezes or unfreezes it, or sets its slow mode, as the
// caller's role allows (docs/protocol.md, "Frozen and slow mode").
func updateConversation(ctx context.Context, args []string) error {
	var set client.ConversationSettings
	f, conv, _, err := convCommand("conversations update",
		"inboxd conversations update --conversation ID [--title T] [--frozen=true|false] [--slow-mode SECONDS]: rename a conversation, freeze or unfreeze it, or set its slow mode (0: off)",
		args, true, func(fs *flag.FlagSet) {
			fs.Func("title", "the new title", func(s string) error {
				set.Title = &s
				return nil
			})
			fs.Func("frozen", "true: freeze (only admins and the owner write), false: unfreeze", func(s string) error {
				v, err := strconv.ParseBool(s)
				set.Frozen = &v
				return err
			})
			fs.Func("slow-mode", "seconds a member below moderator waits between its sends (0: off)", func(s string) error {
				v, err := strconv.Atoi(s)
				set.SlowMode = &v
				return err
			})
		})
	if err != nil {
		return err
	}
	if set.Title == nil && set.Frozen == nil && set.SlowMode == nil {
		return errors.New("conversations update: give --title, --frozen or --slow-mode")
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	if err := c.UpdateConversation(ctx, conv, set); err != nil {
		return err
	}
	if f.jsonOut {
		out := map[string]any{"conversation_id": conv, "updated": true}
		if set.Title != nil {
			out["title"] = *set.Title
		}
		if set.Frozen != nil {
			out["frozen"] = *set.Frozen
		}
		if set.SlowMode != nil {
			out["slow_mode"] = *set.SlowMode
		}
		return printJSON(os.Stdout, out)
	}
	fmt.Printf("updated conversation %d\n", conv)
	return nil
}
