package importer

import (
	"testing"
	"time"
)

// FuzzLine feeds arbitrary lines to the parser and the checker, after a
// conversation line: nothing panics, and an accepted line yields an event
// that the log accepts.
func FuzzLine(f *testing.F) {
	f.Add([]byte(`{"kind":"message","conversation":"c1","id":"m1","sender":1,"body":"hi","sent_at":"2022-01-01T00:01:00Z"}`))
	f.Add([]byte(`{"kind":"member","conversation":"c1","user_id":3,"joined_at":"2022-01-01T00:02:00Z"}`))
	f.Add([]byte(`{"kind":"conversation","id":"c2","members":[1],"created_at":"2022-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"kind":"message","body":"\u0000"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		k := newChecker("fuzz", 0, nil, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		first, err := parseLine([]byte(`{"kind":"conversation","id":"c1","members":[1,2],"created_at":"2022-01-01T00:00:00Z"}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.line(first); err != nil {
			t.Fatal(err)
		}
		l, err := parseLine(raw)
		if err != nil {
			return
		}
		e, err := k.line(l)
		if err != nil {
			return
		}
		if err := e.Validate(0); err != nil {
			t.Fatalf("accepted line %q makes an invalid event: %v", raw, err)
		}
	})
}
