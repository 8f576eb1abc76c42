package testenv

import "testing"

func TestPortTaken(t *testing.T) {
	cases := map[string]bool{
		"inboxd dev: --http-port 8080 is taken":                                 true,
		"listen tcp 127.0.0.1:9092: bind: address already in use":               true,
		`LOG:  could not bind IPv4 address "127.0.0.1": Address already in use`: true,
		"postgres exited during start-up: exit status 1":                        false,
		"gateway listening": false,
	}
	for out, want := range cases {
		if got := PortTaken(out); got != want {
			t.Errorf("PortTaken(%q) = %v, want %v", out, got, want)
		}
	}
}
