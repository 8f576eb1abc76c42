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
	"text/tabwriter"
	"time"

	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
)

// runAPIKey is `inboxd apikey create|list|revoke`: the server API's keys
// (docs/operations.md, "Server API keys"), written straight into
// PostgreSQL by package apikey.
func runAPIKey(ctx context.Context, args []string) error {
	action := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		action, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("apikey", flag.ContinueOnError)
	var c common
	c.bind(fs, false)
	name := fs.String("name", "", "create: the key's name (the service it is for; kept across a rotation)")
	scopes := fs.String("scopes", "", "create: comma-separated scopes of "+strings.Join(apikey.Scopes, ","))
	jsonOut := fs.Bool("json", false, "print JSON lines")
	fs.Usage = config.Usage(fs, "inboxd apikey create --name NAME --scopes a,b: make a server API key (printed once)\n"+
		"inboxd apikey list: every key, revoked ones too\n"+
		"inboxd apikey revoke ID: revoke a key (refused from the next request, on every gateway)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if action == "" {
		fs.Usage()
		return errors.New("apikey: give create, list or revoke")
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	pool, err := app.OpenDB(ctx, c.databaseURL, 2, true, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch action {
	case "create":
		k, secret, err := apikey.Create(ctx, pool, *name, config.SplitList(*scopes))
		if err != nil {
			return fmt.Errorf("apikey create: %w", err)
		}
		if *jsonOut {
			return printJSON(os.Stdout, map[string]any{"id": k.ID, "name": k.Name, "scopes": k.Scopes, "key": secret})
		}
		fmt.Printf("created API key %d (%s), scopes %s\n%s\nThis is the only time the key is shown: store it now.\n",
			k.ID, k.Name, strings.Join(k.Scopes, ","), secret)
		return nil
	case "list":
		ks, err := apikey.List(ctx, pool)
		if err != nil {
			return err
		}
		return printKeys(os.Stdout, ks, *jsonOut)
	case "revoke":
		if fs.NArg() != 1 {
			return errors.New("apikey revoke: give one key id")
		}
		id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("apikey revoke: %q is not a key id", fs.Arg(0))
		}
		at, err := apikey.Revoke(ctx, pool, id)
		if err != nil {
			return err
		}
		fmt.Printf("API key %d revoked at %s\n", id, at.UTC().Format(time.RFC3339))
		return nil
	}
	return fmt.Errorf("apikey: unknown action %q (create, list or revoke)", action)
}

// printKeys prints keys as a table or JSON lines.
func printKeys(w io.Writer, ks []apikey.Key, jsonOut bool) error {
	if jsonOut {
		for _, k := range ks {
			if err := printJSON(w, map[string]any{"id": k.ID, "name": k.Name, "scopes": k.Scopes,
				"created_at": k.CreatedAt.UTC(), "revoked_at": k.RevokedAt, "last_used_at": k.LastUsedAt}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tLAST USED\tREVOKED")
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, k := range ks {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, strings.Join(k.Scopes, ","),
			k.CreatedAt.UTC().Format(time.RFC3339), when(k.LastUsedAt), when(k.RevokedAt))
	}
	return tw.Flush()
}
