package gateway

import "github.com/inboxd/inboxd/gateway/ephemeral"

// EphemeralConfig configures typing and presence; see ephemeral.Config,
// whose defaults are ephemeral's (ephemeral.DefaultTypingExpiry, ...).
type EphemeralConfig = ephemeral.Config
