package events

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// Sealed bodies: a body in the log can be erased for good. The gateway
// seals a message's body (and every edit of it) with a key of its own,
// kept outside the log (PostgreSQL's body_keys, by msg_id), and the log
// carries only the sealed form (sealed_body). Deleting the message destroys
// the key: the log still holds the ciphertext, which nothing can open any
// more, so a replay rebuilds the message as deleted. AES-256-GCM, with the
// msg_id as additional data, so that a sealed body cannot be moved to
// another message.

// KeySize is the size of a body key.
const KeySize = 32

// NewKey returns a fresh random body key.
func NewKey() []byte {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		panic("events: no randomness: " + err.Error())
	}
	return k
}

// Seal returns the sealed form of body under key for message msgID:
// base64url(nonce || ciphertext || tag), unpadded.
func Seal(key []byte, msgID, body string) (string, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(body)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := aead.Seal(nonce, nonce, []byte(body), []byte(msgID))
	return base64.RawURLEncoding.EncodeToString(out), nil
}

// ErrUnsealable says a sealed body does not open with the key it names: it
// was altered, or sealed for another message.
var ErrUnsealable = errors.New("sealed body does not open")

// Open returns the body of sealed, a Seal of message msgID under key.
func Open(key []byte, msgID, sealed string) (string, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return "", err
	}
	raw, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", ErrUnsealable
	}
	body, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(msgID))
	if err != nil {
		return "", ErrUnsealable
	}
	return string(body), nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("body key of %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealedLen bounds the encoded length of a sealed body of maxBody bytes.
func sealedLen(maxBody int) int { return base64.RawURLEncoding.EncodedLen(12 + maxBody + 16) }
