package gateway

import "github.com/turnstile-rl/turnstile/trainer"

// The client library is the gateway's backend.
var _ Backend = (*trainer.Client)(nil)
