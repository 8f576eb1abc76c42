// Command kafkaready waits until a Kafka cluster serves clients: it answers
// a metadata request, its controller creates a topic, and a record is
// acknowledged by all in-sync replicas. scripts/kafka-local.sh runs it after
// starting a broker.
//
//	go run ./scripts/kafkaready -brokers 127.0.0.1:19092 -timeout 90s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:19092", "comma-separated seed brokers")
	timeout := flag.Duration("timeout", 90*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	var last error
	for {
		err := probe(ctx, strings.Split(*brokers, ","))
		if err == nil {
			fmt.Printf("kafkaready: %s ready after %v\n", *brokers, time.Since(start).Round(10*time.Millisecond))
			return
		}
		last = err
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "kafkaready: %s not ready after %v: %v\n", *brokers, *timeout, last)
			os.Exit(1)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func probe(ctx context.Context, brokers []string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("inboxd-kafkaready"),
		kgo.RequestRetries(0), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	if len(md.Brokers) == 0 || md.Controller < 0 {
		return errors.New("metadata: no brokers or no active controller yet")
	}
	topic := fmt.Sprintf("inboxd.ready.%d", time.Now().UnixNano())
	resp, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic: %w", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_, _ = adm.DeleteTopics(dctx, topic)
	}()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("ready")}).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	// franz-go's guess from the API versions the broker advertises.
	if versions, err := adm.ApiVersions(ctx); err == nil {
		versions.Each(func(v kadm.BrokerApiVersions) {
			fmt.Printf("kafkaready: broker %d speaks the protocol of %s\n", v.NodeID, v.VersionGuess())
		})
	}
	return nil
}
