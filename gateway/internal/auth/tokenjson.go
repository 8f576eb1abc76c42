package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrTokenJSON is the cause of a refusal of a token whose header or
// claims are ambiguous or of the wrong type.
var ErrTokenJSON = errors.New("token JSON refused")

// checkTokenJSON refuses what jwt's decoding would let through silently:
// a member repeated in the header or the claims (Go's decoder keeps the
// last one, and matches names case-insensitively, so {"sub":"1","SUB":"2"}
// is a duplicate too: another verifier could read the other one), and a
// time claim (exp, nbf, iat) that is not a JSON number (jwt accepts
// "exp":"1700000000", a string). It runs before the signature is checked,
// for every algorithm; either failure is the same refusal.
func checkTokenJSON(raw string) error {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return nil // jwt says what is wrong with it
	}
	for i, part := range parts[:2] {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(part, "="))
		if err != nil {
			return nil
		}
		if err := checkJSONMembers(b, i == 1); err != nil {
			return fmt.Errorf("%w: %v", ErrTokenJSON, err)
		}
	}
	return nil
}

// checkJSONMembers checks the members of the JSON object b: no name twice
// (compared case-insensitively) and, for claims, numeric time claims.
func checkJSONMembers(b []byte, claims bool) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil // not an object: jwt refuses it
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := t.(string)
		key := strings.ToLower(name)
		if seen[key] {
			return fmt.Errorf("%q given twice", name)
		}
		seen[key] = true
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if claims && (key == "exp" || key == "nbf" || key == "iat") {
			if _, ok := v.(json.Number); !ok {
				return fmt.Errorf("%s must be a number", name)
			}
		}
	}
	return nil
}
