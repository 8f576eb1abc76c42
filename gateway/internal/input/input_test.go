package input

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// TestCheckJSONText pins the scanner: what it refuses, and that real pairs,
// escaped backslashes and U+FFFD pass.
func TestCheckJSONText(t *testing.T) {
	for _, bad := range []string{`"\u0000"`, `{"a":"\ud800"}`, `["\udfff"]`, `"\ud800\ud800"`, `"\ud800\n"`, `"x\ud800"`, `{"\u0000":1}`} {
		require.Error(t, CheckJSONText([]byte(bad)), bad)
	}
	for _, good := range []string{`"\ud83d\ude00"`, `"\uD83D\uDE00"`, `"\\u0000"`, `"\\ud800"`, `"\ufffd"`, `"\u0001"`, `"a\"\\"`, `{"k":["\u00e9",1,null]}`} {
		require.NoError(t, CheckJSONText([]byte(good)), good)
	}
}

// FuzzDecodeBody drives the request body decoder with every request type:
// it must never panic, every failure must be a client error of the error
// shape, and a success must have been one valid UTF-8 JSON object.
func FuzzDecodeBody(f *testing.F) {
	for _, seed := range []string{
		`{"msg_id":"0f8fad5b-d9cb-469f-a165-70867728950e","body":"hi"}`,
		`{"title":"t","members":[1,2,3]}`,
		`{"user_id":42}`, `{"pinned":true,"muted":false}`, `{"seq":7}`,
		`{"msg_id":`, `{"body":"x","extra":1}`, `{"body":5}`, "{\"body\":\"\xff\"}",
		``, `null`, `[]`, `{} {}`, `{"seq":1e400}`, `{"members":[1.5]}`, `{"seq":-1}`,
		`{"body":"\ud800"}`, " \t\n{}", `{"user_id":9223372036854775808}`,
	} {
		f.Add([]byte(seed))
	}
	targets := []func() any{
		func() any { return &protocol.SendMessage{} },
		func() any { return &protocol.CreateConversation{} },
		func() any { return &protocol.AddMember{} },
		func() any { return &protocol.SetRecord{} },
		func() any { return &protocol.MarkRead{} },
		func() any { return &protocol.DevTokenRequest{} },
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, newT := range targets {
			v := newT()
			err := DecodeJSON(raw, v)
			if err != nil {
				var e *apierr.Error
				if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != protocol.CodeBadRequest || e.Message == "" {
					t.Fatalf("decode error is not a bad_request: %#v", err)
				}
				continue
			}
			if !utf8.Valid(raw) || !json.Valid(raw) {
				t.Fatalf("accepted invalid input %q", raw)
			}
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) != nil || obj == nil {
				t.Fatalf("accepted a non-object %q", raw)
			}
		}
	})
}
