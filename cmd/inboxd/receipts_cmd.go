package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
)

// runReceipts is inboxd receipts: the read positions of a conversation's
// members who show them.
func runReceipts(ctx context.Context, args []string) error {
	f, conv, _, err := convCommand("receipts", "inboxd receipts --conversation ID: how far each member has read (those who show it)",
		args, true, nil)
	if err != nil {
		return err
	}
	c, _, err := f.client()
	if err != nil {
		return err
	}
	rs, err := c.Receipts(ctx, conv)
	if err != nil {
		return err
	}
	if f.jsonOut {
		for _, r := range rs {
			if err := printJSON(os.Stdout, map[string]int64{"conversation_id": conv, "user_id": r.UserID, "read_seq": r.ReadSeq}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tREAD UP TO")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t#%d\n", r.UserID, r.ReadSeq)
	}
	return tw.Flush()
}
