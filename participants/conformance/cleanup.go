package conformance

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// cleanup retires the live session of every rollout the kit made up (R9),
// so the participant holds none of them afterwards: a checkpoint counts
// every live session on its participants that no other set claims as a
// member of its set, and one with no workflow would abort it
// (MemberMissing). Verified sessions and fences stay; neither makes a
// member.
func (k *kit) cleanup(ctx context.Context) Result {
	res := Result{Rule: Rule{ID: CleanupID, Name: "clean up the kit's sessions"}}
	retired, err := k.retireLive(ctx)
	if err != nil {
		res.Verdict, res.Evidence = Fail, err.Error()
		return res
	}
	var left []string
	for _, id := range k.usedIDs() {
		info, ok, err := k.session(ctx, id)
		if err != nil {
			res.Verdict, res.Evidence = Fail, err.Error()
			return res
		}
		if ok && !info.Retired {
			left = append(left, fmt.Sprintf("%s (attempt %d)", id, info.Attempt))
		}
	}
	if len(left) > 0 {
		res.Verdict, res.Evidence = Fail, fmt.Sprintf("live sessions of the kit's rollouts after retiring them: %s", strings.Join(left, ", "))
		return res
	}
	res.Verdict = Pass
	res.Evidence = fmt.Sprintf("retired the live sessions of %d of the kit's %d rollouts; none is live now, so a checkpoint of this participant does not count them as members", retired, len(k.used))
	return res
}

// retireLive retires the live session of each rollout the kit used and
// returns how many it retired.
func (k *kit) retireLive(ctx context.Context) (int, error) {
	n := 0
	for _, id := range k.usedIDs() {
		info, ok, err := k.session(ctx, id)
		if err != nil {
			return n, err
		}
		if !ok || info.Retired {
			continue
		}
		a, err := k.control(ctx, protocol.RouteControlRetire, "", protocol.RetireRequest{RolloutID: id, Attempt: info.Attempt})
		if err != nil {
			return n, err
		}
		if err := want("retire "+id, a, http.StatusOK, ""); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (k *kit) usedIDs() []string {
	ids := make([]string, 0, len(k.used))
	for id := range k.used {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
