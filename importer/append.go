package importer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/producer"
)

// run appends the events of the lines from line from on, in file order
// (so each conversation's history is in order in its partition), saving
// the checkpoint after every ChunkLines lines once the log acknowledged
// them all.
func (a *appender) run(ctx context.Context, k *checker, from int64, res *Result) error {
	inChunk := 0
	last := time.Now()
	lines, err := scan(a.cfg.File, nil, func(n int64, raw []byte) error {
		l, err := parseLine(raw)
		var e *events.Event
		if err == nil {
			e, err = k.line(l)
		}
		if err != nil {
			return fmt.Errorf("line %d: %v (the file changed since it was checked?)", n, err)
		}
		if n < from {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		a.append(ctx, e)
		res.Appended++
		if a.cfg.lineHook != nil {
			a.cfg.lineHook(n)
		}
		if inChunk++; inChunk >= a.cfg.ChunkLines {
			inChunk = 0
			if err := a.checkpoint(ctx, checkpoint{next: n + 1}); err != nil {
				return err
			}
		}
		if a.cfg.Progress != nil && time.Since(last) >= a.cfg.ProgressEvery {
			last = time.Now()
			fmt.Fprintf(a.cfg.Progress, "import: appended up to line %d of %d\n", n, res.Lines)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return a.checkpoint(ctx, checkpoint{next: lines + 1, done: true})
}

// append appends e without waiting; the outcome is collected in a.
func (a *appender) append(ctx context.Context, e *events.Event) {
	a.prod.AppendAsync(ctx, e, func(p producer.Position, err error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if err != nil {
			if a.err == nil {
				a.err = fmt.Errorf("append %s of conversation %d: %w", e.Type, e.ConversationID, err)
			}
			return
		}
		if p.Offset+1 > a.ends[p.Partition] {
			a.ends[p.Partition] = p.Offset + 1
		}
	})
}

// checkpoint waits until everything appended so far is acknowledged, then
// saves cp.
func (a *appender) checkpoint(ctx context.Context, cp checkpoint) error {
	if err := a.prod.Flush(ctx); err != nil {
		return fmt.Errorf("wait for the log's acknowledgements: %w", err)
	}
	a.mu.Lock()
	err := a.err
	a.mu.Unlock()
	if err != nil {
		return err
	}
	return saveCheckpoint(ctx, a.pool, a.cfg.Source, a.sum, cp)
}

const sqlProjectedOffsets = `SELECT "partition", next_offset FROM consumer_offsets WHERE topic = $1`

// waitProjected waits until the fanout's stored offsets pass every record
// this run appended.
func (a *appender) waitProjected(ctx context.Context, start time.Time, res *Result) error {
	a.mu.Lock()
	want := make(map[int32]int64, len(a.ends))
	for p, o := range a.ends {
		want[p] = o
	}
	a.mu.Unlock()
	last := time.Now()
	for {
		behind, err := projectedBehind(ctx, a.cfg.servers(a.pool), a.prod.Topic(), want)
		if err != nil {
			return err
		}
		if behind == 0 {
			return nil
		}
		if a.cfg.Progress != nil && time.Since(last) >= a.cfg.ProgressEvery {
			last = time.Now()
			fmt.Fprintf(a.cfg.Progress, "import: waiting for the fanout: %d records to project (%s since the first append)\n",
				behind, time.Since(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the projection of the import: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// servers are the pools the projection is read on: Servers, or pool.
func (c Config) servers(pool *pgxpool.Pool) []*pgxpool.Pool {
	if len(c.Servers) > 0 {
		return c.Servers
	}
	return []*pgxpool.Pool{pool}
}

// projectedBehind is how many records of want (partition -> end) the
// stored offsets of topic are behind, each partition's offset read on
// the server that stores it (the highest any server has: a moved
// partition's old server keeps an older row until it is cleaned).
func projectedBehind(ctx context.Context, pools []*pgxpool.Pool, topic string, want map[int32]int64) (int64, error) {
	have := map[int32]int64{}
	for _, pool := range pools {
		rows, err := pool.Query(ctx, sqlProjectedOffsets, topic)
		if err != nil {
			return 0, fmt.Errorf("read the fanout's offsets of %s: %w", topic, err)
		}
		for rows.Next() {
			var p int32
			var n int64
			if err := rows.Scan(&p, &n); err != nil {
				rows.Close()
				return 0, fmt.Errorf("read the fanout's offsets of %s: %w", topic, err)
			}
			have[p] = max(have[p], n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("read the fanout's offsets of %s: %w", topic, err)
		}
	}
	var behind int64
	for p, end := range want {
		behind += max(0, end-have[p])
	}
	return behind, nil
}

// ErrNotProjected is wrapped when, the import projected, fewer of the
// file's messages are in its conversations than the file holds.
var ErrNotProjected = errors.New("imported messages missing from the projections")

const sqlImportedCount = `SELECT count(*) FROM messages WHERE conversation_id = ANY($1::bigint[]) AND imported AND kind = 'text'`

// checkProjected checks that the file's conversations hold its messages
// (a refusal by the projector is never silent).
func checkProjected(ctx context.Context, pools []*pgxpool.Pool, ids map[string]int64, want int64) error {
	convs := make([]int64, 0, len(ids))
	for _, id := range ids {
		convs = append(convs, id)
	}
	var have int64
	for _, pool := range pools { // each conversation's messages are on its server
		var n int64
		if err := pool.QueryRow(ctx, sqlImportedCount, convs).Scan(&n); err != nil {
			return fmt.Errorf("count the imported messages: %w", err)
		}
		have += n
	}
	if have != want {
		return fmt.Errorf("%w: %d of the file's %d messages are projected (see the rejections table of its conversations)",
			ErrNotProjected, have, want)
	}
	return nil
}
