package events

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A sealed body opens with its key for its message only; altered, moved to
// another message or opened with another key, it does not.
func TestSealOpen(t *testing.T) {
	key, other := NewKey(), NewKey()
	sealed, err := Seal(key, "m1", "hello")
	require.NoError(t, err)
	require.NotContains(t, sealed, "hello")
	body, err := Open(key, "m1", sealed)
	require.NoError(t, err)
	require.Equal(t, "hello", body)
	_, err = Open(key, "m2", sealed)
	require.ErrorIs(t, err, ErrUnsealable, "another message's")
	_, err = Open(other, "m1", sealed)
	require.ErrorIs(t, err, ErrUnsealable, "another key")
	raw := []byte(sealed)
	raw[len(raw)-2] ^= 1
	_, err = Open(key, "m1", string(raw))
	require.ErrorIs(t, err, ErrUnsealable, "altered")
	again, err := Seal(key, "m1", "hello")
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce every time")

	e := New(MessageSent, 1, 2)
	e.MsgID, e.SealedBody = "0f8fad5b-d9cb-469f-a165-70867728950e", sealed
	require.NoError(t, e.Validate(0))
	e.Body = Ptr("x")
	require.ErrorIs(t, e.Validate(0), ErrInvalid, "both body and sealed_body")
}
