package gateway

import "github.com/inboxd/inboxd/gateway/ephemeral"

// EphemeralConfig configures typing and presence; see ephemeral.Config.
type EphemeralConfig = ephemeral.Config

// Defaults of EphemeralConfig.
const (
	DefaultTypingExpiry   = ephemeral.DefaultTypingExpiry
	DefaultTypingInterval = ephemeral.DefaultTypingInterval
	DefaultPresenceGrace  = ephemeral.DefaultPresenceGrace
	DefaultPresenceExpiry = ephemeral.DefaultPresenceExpiry
)
