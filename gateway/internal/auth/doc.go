// Package auth verifies the bearer tokens of the gateway: JWTs signed
// with HS256 by a shared secret, or with RS256, ES256 or EdDSA (Ed25519)
// by a key of the identity provider's JWKS (a JSON Web Key Set fetched
// over HTTP, cached, refreshed periodically and on an unknown kid, never
// more often than a floor). It returns the user id of a valid token.
//
// It owns the rules of a token (docs/protocol.md, "Identity"): the
// algorithms allowed and which key type each needs, the required claims
// (exp; iss and aud when configured), the user id claim, and the refusal
// of ambiguous JSON (a member named twice). It must not know HTTP
// requests or the error shape of the API: the gateway turns its errors
// into 401s (and ErrKeysUnavailable into a 503), and caches what it
// accepted.
//
// Files:
//
//	config.go     Config, its defaults and validation
//	verifier.go   Verifier: the algorithm/key rules and the claims
//	tokenjson.go  the refusal of duplicate members and string time claims
//	jwk.go        parsing a JWKS into public keys
//	keyset.go     the fetched key set: cache, refresh floor, Run
//
// authtest is an identity provider for tests (keys, a JWKS server that
// counts its fetches, signing).
package auth
