package testsupport

import (
	"fmt"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// GroupReport is a report of repeat of group g of set s (3 members, a
// retry budget of 1): kind of attempt, retryable or not.
func GroupReport(repeat, attempt int, kind string, retryable bool) rollout.GroupReport {
	return rollout.GroupReport{
		Set: "s", Group: "g", Size: 3, Budget: 1, RolloutID: rollout.GroupRolloutID("s", "g", repeat),
		Repeat: repeat, Attempt: attempt, Kind: kind, Retryable: retryable, Reason: fmt.Sprintf("%s of attempt %d", kind, attempt),
	}
}
