package testenv

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/producer"
)

// WaitCaughtUp waits until the offsets stored in PostgreSQL reach the end
// offsets of the topic.
func WaitCaughtUp(ctx context.Context, pool *pgxpool.Pool, p *producer.Producer, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		return err
	}
	want, err := endOffsets(ctx, kadm.NewClient(p.Client()), p.Topic())
	if err != nil {
		return err
	}
	for {
		rows, err := pool.Query(ctx, `SELECT "partition", next_offset FROM consumer_offsets WHERE topic = $1`, p.Topic())
		if err == nil {
			have := map[int32]int64{}
			for rows.Next() {
				var pt int32
				var n int64
				if rows.Scan(&pt, &n) == nil {
					have[pt] = n
				}
			}
			rows.Close()
			done := true
			for pt, end := range want {
				if have[pt] < end {
					done = false
				}
			}
			if done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fanout not caught up with %v after %v", want, timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// endOffsets lists the end offset of every partition of topic that has
// records. A partition answering with an error (a broker that has just
// created the topic may not know every leader yet) is listed again
// rather than read as empty, which would let a wait end before
// anything was applied.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			want := map[int32]int64{}
			ends.Each(func(o kadm.ListedOffset) {
				if o.Offset > 0 {
					want[o.Partition] = o.Offset
				}
			})
			return want, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
