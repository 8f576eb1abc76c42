package projector_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/projector"
)

func TestClassify(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("apply: %w", &pgconn.PgError{Code: code, Message: "x"})
	}
	for _, tc := range []struct {
		name string
		err  error
		want projector.Class
	}{
		{"NUL in text", pg("22021"), projector.DataError},
		{"value too long", pg("22001"), projector.DataError},
		{"check violation", pg("23514"), projector.DataError},
		{"unique violation", pg("23505"), projector.DataError},
		{"index row too big", pg("54000"), projector.DataError},
		{"raised by a trigger", pg("P0001"), projector.DataError},
		{"serialization failure", pg("40001"), projector.Transient},
		{"deadlock", pg("40P01"), projector.Transient},
		{"admin shutdown", pg("57P01"), projector.Transient},
		{"cannot connect now", pg("57P03"), projector.Transient},
		{"statement timeout", pg("57014"), projector.Transient},
		{"connection failure", pg("08006"), projector.Transient},
		{"too many connections", pg("53300"), projector.Transient},
		{"disk full", pg("53100"), projector.Transient},
		{"read-only standby", pg("25006"), projector.Transient},
		{"undefined column", pg("42703"), projector.Systemic},
		{"undefined table", pg("42P01"), projector.Systemic},
		{"permission denied", pg("42501"), projector.Systemic},
		{"internal error", pg("XX000"), projector.Systemic},
		{"context cancelled", fmt.Errorf("apply: %w", context.Canceled), projector.Transient},
		{"deadline", fmt.Errorf("apply: %w", context.DeadlineExceeded), projector.Transient},
		{"network", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, projector.Transient},
		{"closed", fmt.Errorf("x: %w", net.ErrClosed), projector.Transient},
		{"fenced", fmt.Errorf("x: %w", &projector.FencedError{Msg: "offsets moved"}), projector.Transient},
		{"unknown", io.ErrUnexpectedEOF, projector.Systemic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want.String(), projector.Classify(tc.err).String())
		})
	}
}
