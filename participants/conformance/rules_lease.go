package conformance

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// leaseKitMillis is the lease the kit gives its prepare for R28, and
// leaseKitWait how long past it the kit waits for the session to resume.
const (
	leaseKitMillis = 200
	leaseKitWait   = 30 * time.Second
)

// checkLease: R28. A prepared session that hears nothing more for its
// lease resumes by itself; a lease out of bounds is refused. Skipped for a
// participant that does not list prepare_lease_v1.
func checkLease(ctx context.Context, k *kit) (string, error) {
	caps, err := k.capabilities(ctx)
	if err != nil {
		return "", err
	}
	if !slices.Contains(caps.Features, protocol.FeaturePrepareLease) {
		return "", skipError{"the participant does not list " + protocol.FeaturePrepareLease}
	}
	id, ckpt := k.rollout("r28"), k.checkpointID("k28")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	a, err := k.control(ctx, protocol.RouteControlPrepare, "", protocol.PrepareRequest{CheckpointID: ckpt, Deadline: future(), LeaseMillis: -1})
	if err != nil {
		return "", err
	}
	if err := want("a prepare with lease_ms -1", a, http.StatusBadRequest, protocol.CodeMalformed); err != nil {
		return "", err
	}
	if err := k.wantPhase(ctx, protocol.PhaseIdle, protocol.AdmissionOpen); err != nil {
		return "", fmt.Errorf("after the refused prepare: %w", err)
	}
	a, err = k.control(ctx, protocol.RouteControlPrepare, "", protocol.PrepareRequest{CheckpointID: ckpt, Deadline: future(), LeaseMillis: leaseKitMillis})
	if err != nil {
		return "", err
	}
	if err := decode("prepare "+ckpt, a, &protocol.PrepareResponse{}); err != nil {
		return "", err
	}
	if err := k.awaitIdle(ctx, leaseKitMillis*time.Millisecond+leaseKitWait); err != nil {
		return "", err
	}
	if _, err := k.operate(ctx, k.opReq(id, 0, 2, 1)); err != nil {
		return "", fmt.Errorf("a mutation after the lease ended: %w", err)
	}
	a, err = k.control(ctx, protocol.RouteControlCommit, "", protocol.CommitRequest{CheckpointID: ckpt, Location: k.location("k28")})
	if err != nil {
		return "", err
	}
	if err := want("a commit after the lease ended", a, http.StatusConflict, protocol.CodeStaleCheckpoint); err != nil {
		return "", err
	}
	if _, err := k.resume(ctx, ckpt, ""); err != nil {
		return "", fmt.Errorf("a late resume must replay: %w", err)
	}
	return fmt.Sprintf("lease_ms -1 → 400 malformed_request, nothing changed; prepared with lease_ms %d and left alone → idle, admission open by itself; a mutation applied; a late commit → 409 stale_checkpoint; a late resume → 200", leaseKitMillis), nil
}

// awaitIdle polls the control status until the phase is idle with
// admission open, or fails after within.
func (k *kit) awaitIdle(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := k.controlStatus(ctx)
		if err == nil && st.Phase == protocol.PhaseIdle && st.Admission == protocol.AdmissionOpen {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the prepared session did not resume by itself within %s of its lease: last status %+v (%v)", within, st, err)
		case <-tick.C:
		}
	}
}
