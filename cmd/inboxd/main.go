// Command inboxd is the one binary of inboxd: each subcommand parses its
// flags (every flag has an INBOXD_* environment twin), wires the components
// and runs them until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{
	"dev":           {"run everything in one process on an embedded Kafka and PostgreSQL", runDev},
	"gateway":       {"serve the HTTP and WebSocket API", runGateway},
	"fanout":        {"consume the event log into the PostgreSQL projections", runFanout},
	"notifier":      {"notify members who are not connected of new messages through a webhook", runNotifier},
	"migrate":       {"apply the database migrations", runMigrate},
	"verify":        {"check invariants I1-I8 on the projections", runVerify},
	"apikey":        {"create, list or revoke the server API's keys (apikey create|list|revoke)", runAPIKey},
	"shards":        {"list the PostgreSQL servers and the partitions each holds, or add a server (shards list|add-server)", runShards},
	"offsets":       {"compare the fanout's stored offsets with the log, or reset them (offsets reset)", runOffsets},
	"login":         {"get a dev token (or store one) for send, tail and conversations", runLogin},
	"send":          {"send a message to a conversation and print its seq", runSend},
	"tail":          {"print your inbox live, resuming where the last run stopped", runTail},
	"conversations": {"list your conversations, or rename one, freeze it or set its slow mode (conversations update)", runConversations},
	"create":        {"create a conversation with you and the given users", runCreate},
	"members":       {"list a conversation's members, add or remove users, or give them a role (members list|add|remove|role)", runMembers},
	"history":       {"print a conversation's messages, oldest first", runHistory},
	"edit":          {"replace the text of a message you sent", runEdit},
	"delete":        {"delete a message you sent", runDelete},
	"react":         {"react to a message with an emoji (--off: remove your reaction)", runReact},
	"report":        {"report someone else's message to the moderators", runReport},
	"block":         {"block a user (its messages emptied, its typing and presence hidden, no adding you)", runBlock},
	"unblock":       {"unblock a user you blocked", runUnblock},
	"blocks":        {"list the users you block", runBlocks},
	"search":        {"find messages you can see by their words, one line each with the matches marked", runSearch},
	"read":          {"mark a conversation read (up to its last message, or --seq)", runRead},
	"receipts":      {"show how far each member of a conversation has read", runReceipts},
	"pin":           {"pin a conversation in your list (--off: unpin)", runPin},
	"mute":          {"mute a conversation (--off: unmute)", runMute},
	"settings":      {"print your settings, or change them (--hide-receipts, --hide-presence)", runSettings},
	"presence":      {"print who of the given users is online (those you share a conversation with)", runPresence},
	"analytics":     {"live figures from the event log in its own consumer group", runAnalytics},
	"replay":        {"rebuild the projections from the log (or --verify them)", runReplay},
	"import":        {"import conversations, members and history from another chat system (NDJSON) through the log", runImport},
	"healthcheck":   {"exit 0 when a health endpoint answers 2xx (for container health checks)", runHealthcheck},
}

func usage() {
	fmt.Fprintf(os.Stderr, "inboxd: sync for chat clients on Kafka and PostgreSQL\n\nusage: inboxd <command> [flags]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nrun 'inboxd <command> -h' for its flags\n")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
			usage()
			return
		}
		if os.Args[1] == "bench" {
			// The harness is a binary of its own so that the server links
			// none of it.
			fmt.Fprintln(os.Stderr, "inboxd: bench moved to its own command, inboxd-bench (go run ./cmd/inboxd-bench <figure>, or make bench)")
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "inboxd: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.run(ctx, os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // stopped by a signal while starting up: a clean stop
		}
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		fmt.Fprintf(os.Stderr, "inboxd %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// exitCode ends the process with a code and no further message.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }
