package main

import (
	"context"
	"errors"

	"github.com/inboxd/inboxd/client"
)

func listMembers(ctx context.Context, c *client.Client, jsonOut bool, conv int64) error {
	return errors.New("members list: not yet")
}
