// Package apikey owns the server API's credentials (docs/protocol.md,
// "Server API"): the key format, the scopes, and the api_keys table
// (migrations/00010_server_api.sql) they are created in, listed from,
// revoked in and verified against.
//
// A key is "ik_<id>_<secret>": id is the row's id, secret 32 random bytes
// (base64url). Only SHA-256 of the secret is stored. A fast hash is enough
// where a password needs a slow one (bcrypt, argon2): the secret has 256
// bits of entropy, so no dictionary or brute force can reach it, and the
// gateway verifies it on every request, where a deliberately slow hash
// would cost tens of milliseconds of CPU per call (docs/decisions.md).
//
// Verify reads the key's row on every call, without a cache: a revocation
// holds on every gateway from the next request. It is one primary-key
// read beside the several reads and the append a server API call makes.
//
// The package knows PostgreSQL (through a small Querier) but nothing of
// HTTP; the gateway turns its errors into answers, and `inboxd apikey`
// calls Create, List and Revoke.
package apikey
