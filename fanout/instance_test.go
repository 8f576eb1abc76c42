package fanout_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/fanout"
)

func TestInstanceIDFor(t *testing.T) {
	for _, tc := range []struct{ host, addr, want string }{
		{"fanout-7d9f-x2", "0.0.0.0:9091", "fanout-fanout-7d9f-x2-9091"},
		{"host", "127.0.0.1:9092", "fanout-host-9092"},
		{"host", "[::]:9091", "fanout-host-9091"},
		{"host", "127.0.0.1:0", ""}, // a random port: not stable across restarts
		{"", "0.0.0.0:9091", ""},
		{"host", "nonsense", ""},
	} {
		require.Equal(t, tc.want, fanout.InstanceIDFor(tc.host, tc.addr), "%s %s", tc.host, tc.addr)
	}
}
