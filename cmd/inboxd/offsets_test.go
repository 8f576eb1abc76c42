package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/internal/testenv"
)

// `inboxd offsets` on a healthy pipeline says the offsets belong to the log
// and exits 0; a reset of healthy partitions is refused; after records were
// deleted past the stored offsets it names the partition, offers the two
// ways out and exits 1, and `offsets reset --reset-to start` clears it.
func TestOffsetsCommand(t *testing.T) {
	env := testenv.New(t, testenv.Options{Partitions: 1})
	ctx := testenv.Ctx(t, 2*time.Minute)
	stop := env.StartFanout(t)
	c := events.New(events.ConversationCreated, 1, 1)
	_, err := env.Producer.Append(ctx, c)
	require.NoError(t, err)
	env.WaitCaughtUp(t, time.Minute)
	stop()

	run := func(args ...string) (string, int) {
		cmd := exec.Command(testenv.Binary(t), append([]string{"offsets"}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+env.DatabaseURL, "INBOXD_KAFKA_BROKERS="+strings.Join(env.Brokers, ","),
			"INBOXD_TOPIC="+env.Topic, "INBOXD_LOG_LEVEL=warn")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		require.NoError(t, err, string(out))
		return string(out), 0
	}
	out, code := run()
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "The stored offsets belong to the log.")
	out, code = run("reset", "--reset-to", "start", "--reset-partitions", "0")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "belong to the log")

	// Two more records, then the log loses everything before offset 2.
	for i := 0; i < 2; i++ {
		e := events.New(events.MessageSent, 1, 1)
		e.MsgID, e.Body = "00000000-0000-4000-8000-00000000000"+string(rune('1'+i)), events.Ptr("x")
		_, err := env.Producer.Append(ctx, e)
		require.NoError(t, err)
	}
	deleteBefore(t, env, 2)
	out, code = run()
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "log_truncated")
	require.Contains(t, out, "inboxd replay")
	require.Contains(t, out, "inboxd offsets reset --reset-partitions 0 --reset-to start")
	out, code = run("reset", "--reset-to", "start")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "partition 0: next offset 1 -> 2")
	out, code = run()
	require.Equal(t, 0, code, out)
}

func deleteBefore(t *testing.T, env *testenv.Env, at int64) {
	t.Helper()
	adm := kadm.NewClient(env.Producer.Client())
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: env.Topic, Partition: 0, At: at})
	resp, err := adm.DeleteRecords(testenv.Ctx(t, time.Minute), offs)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
}
