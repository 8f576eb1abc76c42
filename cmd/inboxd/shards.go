package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/app"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/placement"
)

// runShards is `inboxd shards list|add-server`: the placement of the
// partitions on PostgreSQL servers (docs/operations.md, "Shards"), read
// from and written to the catalog (the database --database-url names).
func runShards(ctx context.Context, args []string) error {
	action := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		action, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("shards", flag.ContinueOnError)
	var c common
	c.bind(fs, false)
	fs.StringVar(&c.brokers, "kafka-brokers", "", "list: comma-separated Kafka bootstrap brokers, to count the topic's partitions (without them the servers are listed without their partitions)")
	fs.StringVar(&c.topic, "topic", events.DefaultTopic, "list: the event topic, whose partitions are placed")
	name := fs.String("name", "", "add-server: the server's name (default server-<id>)")
	dsn := fs.String("dsn", "", "add-server: PostgreSQL URL of the new server's database (empty database; it is migrated)")
	jsonOut := fs.Bool("json", false, "list: print JSON")
	server := fs.Int("target-server", 0, "assign, move: the id of the server the partitions go to")
	parts := fs.String("partition-ids", "", "assign, move: comma-separated partitions of the event topic")
	deliveries := fs.String("deliveries-topic", "", "move: the deliveries topic, whose offsets move with the partitions (default <topic>.deliveries)")
	abort := fs.Bool("abort", false, "move: roll back the interrupted moves of the partitions instead (before their copy is recorded)")
	drain := fs.Duration("move-timeout", 2*time.Minute, "move: how long each step waits for the stages (relays, user stages) before the move stops, to be run again")
	gwExpiry := fs.Duration("presence-expiry", 30*time.Second, "move: the gateways' --presence-expiry: a partition leaves its old server once no gateway whose heartbeat is younger reads an older placement")
	fs.Usage = config.Usage(fs, "inboxd shards list: the servers and the partitions each holds\n"+
		"inboxd shards add-server --dsn URL [--name NAME]: migrate an empty database and add it as a server (it holds no partition until one is moved to it)\n"+
		"inboxd shards assign --target-server ID --partition-ids P,...: place partitions on a server while the deployment is new (before anything is projected)\n"+
		"inboxd shards move --target-server ID --partition-ids P,... --kafka-brokers B [--abort]: move partitions with their state, one after the other (paused, settled, copied, switched; run it again to resume an interrupted move)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if action != "list" && action != "add-server" && action != "assign" && action != "move" {
		fs.Usage()
		return errors.New("shards: give list, add-server, assign or move")
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
	if action == "add-server" {
		s, err := placement.AddServer(ctx, pool, *name, *dsn)
		if err != nil {
			return fmt.Errorf("shards add-server: %w", err)
		}
		fmt.Printf("added server %d (%s) at %s; it holds no partition yet\n", s.ID, s.Name, redactDSN(s.DSN))
		return nil
	}
	if action == "assign" {
		ps, err := parsePartitions(*parts)
		if err != nil {
			return err
		}
		if err := placement.Assign(ctx, pool, int32(*server), ps); err != nil {
			return fmt.Errorf("shards assign: %w", err)
		}
		fmt.Printf("partitions %v placed on server %d\n", ps, *server)
		return nil
	}
	if action == "move" {
		ps, err := parsePartitions(*parts)
		if err != nil {
			return err
		}
		brokers := config.SplitList(c.brokers)
		if len(brokers) == 0 {
			return errors.New("shards move: give --kafka-brokers (the topic's partition count places the conversations and users)")
		}
		n, err := topicPartitions(ctx, brokers, c.topic)
		if err != nil {
			return err
		}
		topic := *deliveries
		if topic == "" {
			topic = c.topic + ".deliveries"
		}
		return movePartitions(ctx, pool, ps, placement.MoveConfig{Target: int32(*server), Partitions: n, Topic: c.topic,
			Deliveries: topic, DrainTimeout: *drain, GatewayExpiry: *gwExpiry, Logger: log}, brokers, *abort)
	}
	m, err := placement.Load(ctx, pool)
	if err != nil {
		return err
	}
	var n int32
	if brokers := config.SplitList(c.brokers); len(brokers) > 0 {
		if n, err = topicPartitions(ctx, brokers, c.topic); err != nil {
			return err
		}
	}
	return printShards(os.Stdout, m, n, *jsonOut)
}

// movePartitions moves (or with abort, rolls back the moves of) the
// partitions one after the other, printing each one's pause, and the
// pauses' p50 and max.
func movePartitions(ctx context.Context, catalog *pgxpool.Pool, ps []int32, cfg placement.MoveConfig, brokers []string, abort bool) error {
	var pauses []time.Duration
	start := time.Now()
	var rows int64
	for _, p := range ps {
		cfg.Partition = p
		cfg.Settle = func(ctx context.Context, target *pgxpool.Pool, version int64) (int, error) {
			return fanout.ApplyWaiting(ctx, brokers, cfg.Deliveries, p, target, version, cfg.Logger)
		}
		if abort {
			if err := placement.Abort(ctx, catalog, cfg); err != nil {
				return fmt.Errorf("shards move --abort: partition %d: %w", p, err)
			}
			fmt.Printf("partition %d: move rolled back\n", p)
			continue
		}
		res, err := placement.Move(ctx, catalog, cfg)
		if err != nil {
			return fmt.Errorf("shards move: partition %d: %w (run the same command again to resume)", p, err)
		}
		pauses = append(pauses, res.Paused)
		rows += res.Rows
		fmt.Printf("partition %d: server %d -> %d, %d conversations, %d users, %d rows, copied in %v, paused %v (the target held %v), %d deliveries settled\n",
			p, res.From, res.To, res.Conversations, res.Users, res.Rows, res.Copy.Round(time.Millisecond), res.Paused.Round(time.Millisecond),
			res.Fenced.Round(time.Millisecond), res.Settled)
	}
	if len(pauses) > 0 {
		slices.Sort(pauses)
		fmt.Printf("%d partitions, %d rows in %v; pause per partition p50 %v, max %v\n", len(pauses), rows,
			time.Since(start).Round(time.Millisecond), pauses[len(pauses)/2].Round(time.Millisecond), pauses[len(pauses)-1].Round(time.Millisecond))
	}
	return nil
}

// parsePartitions reads "0,2,5".
func parsePartitions(s string) ([]int32, error) {
	var ps []int32
	for _, f := range config.SplitList(s) {
		p, err := strconv.ParseInt(f, 10, 32)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("shards assign: partition %q", f)
		}
		ps = append(ps, int32(p))
	}
	if len(ps) == 0 {
		return nil, errors.New("shards assign: give --partition-ids")
	}
	return ps, nil
}

// topicPartitions is the partition count of topic.
func topicPartitions(ctx context.Context, brokers []string, topic string) (int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("shards: read the partitions of %s: %w", topic, err)
	}
	t, ok := td[topic]
	if !ok || t.Err != nil {
		return 0, fmt.Errorf("shards: topic %s not found (%v)", topic, t.Err)
	}
	return int32(len(t.Partitions)), nil
}

// shardServer is one server in `shards list --json`.
type shardServer struct {
	ID         int32     `json:"id"`
	Name       string    `json:"name"`
	DSN        string    `json:"dsn"`
	AddedAt    time.Time `json:"added_at"`
	Partitions []int32   `json:"partitions"`
}

// printShards lists the servers and the partitions of n each holds (with
// n = 0, the partitions that have a row; server 1 holds the rest).
func printShards(w io.Writer, m *placement.Map, n int32, asJSON bool) error {
	moving := map[int32]placement.Assignment{}
	list := make([]shardServer, 0, len(m.Servers))
	for _, s := range m.Servers {
		ss := shardServer{ID: s.ID, Name: s.Name, DSN: redactDSN(s.DSN), AddedAt: s.AddedAt, Partitions: []int32{}}
		if n > 0 {
			ss.Partitions = append(ss.Partitions, m.Partitions(s.ID, n)...)
		}
		list = append(list, ss)
	}
	for p := range n {
		if a := m.Assignment(p); a.State == placement.Moving {
			moving[p] = a
		}
	}
	if asJSON {
		return printJSON(w, map[string]any{"version": m.Version, "partitions": n, "servers": list})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "placement version %d", m.Version)
	if n > 0 {
		fmt.Fprintf(tw, ", %d partitions", n)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "ID\tNAME\tDSN\tPARTITIONS")
	for _, s := range list {
		dsn := s.DSN
		if dsn == "" {
			dsn = "(the catalog's database)"
		}
		held := fmt.Sprintf("%d %v", len(s.Partitions), s.Partitions)
		if n == 0 {
			held = "(give --kafka-brokers to count)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.ID, s.Name, dsn, held)
	}
	for p, a := range moving {
		fmt.Fprintf(tw, "partition %d: moving from server %d to %d since %s\n", p, a.Server, a.Target, a.UpdatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

var dsnPassword = regexp.MustCompile(`(password\s*=\s*)('[^']*'|\S+)`)

// redactDSN hides a DSN's password, in URL or key=value form.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return dsnPassword.ReplaceAllString(dsn, "${1}xxxxx")
}
