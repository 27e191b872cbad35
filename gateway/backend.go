package gateway

import "github.com/turnstile-rl/turnstile/client"

// The client library is the gateway's backend.
var _ Backend = (*client.Client)(nil)
