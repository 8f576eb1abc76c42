package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/inboxd/inboxd/internal/config"
)

// runBlock is inboxd block USER_ID and runUnblock inboxd unblock USER_ID.
func runBlock(ctx context.Context, args []string) error { return blockCommand(ctx, "block", args) }

func runUnblock(ctx context.Context, args []string) error { return blockCommand(ctx, "unblock", args) }

func blockCommand(ctx context.Context, name string, args []string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	what := "block a user: its messages reach you emptied, its typing, presence and receipts not at all, and it cannot add you"
	if name == "unblock" {
		what = "unblock a user you blocked"
	}
	fs.Usage = config.Usage(fs, "inboxd "+name+" USER_ID: "+what)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("give one USER_ID")
	}
	uid, err := strconv.ParseInt(fs.Arg(0), 10, 64)
	if err != nil || uid <= 0 {
		return fmt.Errorf("bad user id %q", fs.Arg(0))
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	if name == "block" {
		err = c.BlockUser(ctx, uid)
	} else {
		err = c.UnblockUser(ctx, uid)
	}
	if err != nil {
		return err
	}
	if f.jsonOut {
		return printJSON(os.Stdout, map[string]any{"user_id": uid, "blocked": name == "block"})
	}
	fmt.Printf("%sed user %d\n", name, uid)
	return nil
}

// runBlocks is inboxd blocks: the users you block.
func runBlocks(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("blocks", flag.ContinueOnError)
	var f clientFlags
	f.bind(fs)
	fs.Usage = config.Usage(fs, "inboxd blocks: list the users you block")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	bs, err := c.Blocks(ctx)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if f.jsonOut {
			if err := printJSON(os.Stdout, b); err != nil {
				return err
			}
			continue
		}
		fmt.Printf("%d\tsince %s\n", b.UserID, b.At.Format("2006-01-02 15:04:05Z07:00"))
	}
	return nil
}
