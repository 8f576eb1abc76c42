package projector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/events"
)

// Class says what a failed Apply means for its batch. It is decided on the
// typed errors of pgx and the standard library, never on message text.
type Class int

const (
	// Transient failures pass by themselves: a lost connection, a
	// serialization failure or deadlock, a server shutting down or out of
	// connections, a cancelled statement, a standby in the middle of a
	// failover. Retry the same batch with backoff; never dead-letter.
	Transient Class = iota
	// DataError is a failure PostgreSQL raised because of the values
	// written (SQLSTATE classes 22 data exception, 23 integrity
	// violation, 54 program limit, P0 PL/pgSQL raise): the same batch
	// will fail the same way. Isolate the record that causes it.
	DataError
	// Systemic is everything else (a missing table or column after a bad
	// migration, a permission, a bug): neither waiting nor dropping a
	// record is known to help. Retry with backoff, loudly; never
	// dead-letter, since every record would fail the same way.
	Systemic
)

func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case DataError:
		return "data"
	default:
		return "systemic"
	}
}

// Classify returns the class of an error returned by Apply or ApplyTx.
func Classify(err error) Class {
	if err == nil {
		return Transient
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return classifySQLState(pgErr.Code)
	}
	// Failures below the protocol: the connection broke, could not be
	// made, or a statement was interrupted before an answer.
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &netErr) || errors.As(err, &connErr) ||
		errors.Is(err, pgx.ErrTxClosed) || errors.Is(err, net.ErrClosed) {
		return Transient
	}
	var fenced *FencedError
	if errors.As(err, &fenced) || errors.Is(err, ErrHealed) {
		return Transient
	}
	return Systemic
}

func classifySQLState(code string) Class {
	switch code {
	case "25006": // read_only_sql_transaction: a standby during failover
		return Transient
	case "55P03", "55006": // lock_not_available, object_in_use
		return Transient
	case "57014", "57P01", "57P02", "57P03", "57P04", "57P05": // canceled, shutdowns, cannot connect now
		return Transient
	}
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "40"), // transaction rollback: serialization, deadlock
		strings.HasPrefix(code, "53"), // insufficient resources
		strings.HasPrefix(code, "58"): // system error (I/O)
		return Transient
	case strings.HasPrefix(code, "22"), // data exception (e.g. 22021 a NUL in text)
		strings.HasPrefix(code, "23"), // integrity constraint violation
		strings.HasPrefix(code, "54"), // program limit exceeded (e.g. an index row too big)
		strings.HasPrefix(code, "P0"): // raised by a PL/pgSQL function or trigger
		return DataError
	}
	return Systemic
}

// FencedError says that the stored offsets of a batch's partitions are not
// what the batch expected (another process owns them now): transient.
type FencedError struct{ Msg string }

func (e *FencedError) Error() string { return e.Msg }

// ErrHealed is what Probe returns when r itself applies: whatever refused
// it before (a constraint dropped, a migration mended) is gone, so r is
// not poison and its batch is retried as it is. Classify calls it
// Transient.
var ErrHealed = errors.New("the record applies now: not dead-lettered, retrying")

// Probe tells whether r fails because of its own free text: it applies a
// copy of r, with fresh ids and every text replaced by plain ASCII, and
// then, in the same transaction, r itself; the transaction is rolled back.
// nil means the copy applies and r still fails after it, so r's data is
// the cause and r may be dead-lettered. ErrHealed means r applies too: the
// database changed since r failed (the copy's locks keep it from changing
// between the two), and dropping r would lose it. Any other error (the copy
// fails too) means the database refuses anything of this shape, and
// dropping r would not help.
func (p *Projector) Probe(ctx context.Context, r Record) error {
	if r.Event == nil {
		return nil
	}
	e := *r.Event
	e.EventID = probeID(e.EventID)
	if e.MsgID != "" {
		e.MsgID = probeID(e.MsgID)
	}
	if e.Title != "" {
		e.Title = "probe"
	}
	if e.Body != nil {
		e.Body = events.Ptr("probe")
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("probe: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := p.apply(ctx, tx, []Record{{Partition: r.Partition, Offset: r.Offset, Event: &e}}, false); err != nil {
		return fmt.Errorf("probe of %d/%d: %w", r.Partition, r.Offset, err)
	}
	// The copy moved the partition's stored offset past r: r goes one
	// position later so that it is not skipped as already applied.
	again := r
	again.Offset++
	_, err = p.apply(ctx, tx, []Record{again}, false)
	switch {
	case err == nil:
		return ErrHealed
	case Classify(err) == DataError:
		return nil
	default:
		return fmt.Errorf("probe of %d/%d: the record after its copy: %w", r.Partition, r.Offset, err)
	}
}

// probeID returns a uuid that differs from id (its first hex digit turned),
// so the probe never meets the original's rows.
func probeID(id string) string {
	if id == "" {
		return id
	}
	b := []byte(id)
	if b[0] == 'f' || b[0] == 'F' {
		b[0] = '0'
	} else {
		b[0] = 'f'
	}
	return string(b)
}

// ApplyIsolating is Apply for a caller that does not retry (replay): a
// batch that fails because of a record's data (DataError) is split in
// halves, applied in order, until the record is alone; a record alone that
// still fails, and whose Probe applies, is reported to deadLetter and
// stored as a rejection (projection.ReasonDeadLetter) instead, so one bad
// record cannot stop a rebuild. Any other failure is returned.
func (p *Projector) ApplyIsolating(ctx context.Context, recs []Record, deadLetter func(Record, error) error) (Result, error) {
	res, err := p.Apply(ctx, recs)
	if err == nil || Classify(err) != DataError {
		return res, err
	}
	if len(recs) > 1 {
		mid := len(recs) / 2
		a, err := p.ApplyIsolating(ctx, recs[:mid], deadLetter)
		if err != nil {
			return a, err
		}
		b, err := p.ApplyIsolating(ctx, recs[mid:], deadLetter)
		return a.add(b), err
	}
	perr := p.Probe(ctx, recs[0])
	if errors.Is(perr, ErrHealed) {
		return p.Apply(ctx, recs)
	}
	if perr != nil {
		return res, fmt.Errorf("%w (and a copy with its text replaced fails too: %v)", err, perr)
	}
	if err := deadLetter(recs[0], err); err != nil {
		return res, err
	}
	dead := recs[0]
	dead.DeadLetter = true
	return p.Apply(ctx, []Record{dead})
}

// add sums two results of consecutive applies.
func (r Result) add(o Result) Result {
	r.Records += o.Records
	r.Skipped += o.Skipped
	r.Messages += o.Messages
	r.InboxRows += o.InboxRows
	r.Rejected += o.Rejected
	r.Users += o.Users
	r.users = append(r.users, o.users...)
	return r
}
