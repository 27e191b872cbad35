package rollout

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/transcript"
)

// A cut call's prefix is read from its cancellation's details, or from the
// last heartbeat of a call whose worker died; anything else names none. (A
// heartbeat of another shape, such as an older worker's call id, fails to
// decode from a real server's payloads and names none too; the SDK's
// in-memory details here cannot show that: they panic on a type mismatch.)
func TestCutPrefix(t *testing.T) {
	p := ModelPrefix{CallID: "r/a0/t3", Turn: 3, Record: transcript.DigestOf([]byte("c")), Tokens: 64}
	wrap := func(err error) error { return fmt.Errorf("activity: %w", err) }
	require.Equal(t, &p, cutPrefix(wrap(temporal.NewCanceledError(p))))
	require.Equal(t, &p, cutPrefix(wrap(temporal.NewHeartbeatTimeoutError(p))))
	require.Nil(t, cutPrefix(wrap(temporal.NewCanceledError())), "cancelled with no prefix")
	require.Nil(t, cutPrefix(errors.New("boom")))
}
