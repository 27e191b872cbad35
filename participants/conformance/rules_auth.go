package conformance

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// checkDataAuth: R1. Every data-plane route wants the data token; a refused
// caller changes nothing, not even a counter; /healthz is open.
func checkDataAuth(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r1")
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	routes := []struct {
		route string
		body  any
	}{
		{protocol.RouteEnvs, nil}, {protocol.RouteStats, nil}, {protocol.RouteSessions, nil},
		{protocol.RouteStart, k.startReq(id, 0)}, {protocol.RouteOperate, k.opReq(id, 0, 1, 0)},
		{protocol.RouteVerify, verifyReq(id, 0, 0)},
	}
	bad := []string{"", "Bearer wrong-" + k.prefix, "Bearer " + k.cfg.ControlToken, "Bearer",
		"Basic " + base64.StdEncoding.EncodeToString([]byte(k.cfg.DataToken)), "Bearer " + k.cfg.DataToken + "x"}
	n := 0
	for _, authz := range bad {
		for _, r := range routes {
			a, err := k.do(ctx, r.route, id, authz, r.body)
			if err != nil {
				return "", err
			}
			if err := want(fmt.Sprintf("%s with Authorization %q", r.route, authz), a, http.StatusUnauthorized, protocol.CodeUnauthorized); err != nil {
				return "", err
			}
			if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
				return "", fmt.Errorf("%s: 401 without a Bearer WWW-Authenticate challenge (%q)", r.route, a.header.Get("WWW-Authenticate"))
			}
			n++
		}
	}
	after, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	if after != before {
		return "", fmt.Errorf("unauthenticated requests changed the stats from %+v to %+v", before, after)
	}
	if err := k.wantNoSession(ctx, id); err != nil {
		return "", fmt.Errorf("the refused start: %w", err)
	}
	a, err := k.do(ctx, protocol.RouteHealth, "", "", nil)
	if err != nil {
		return "", err
	}
	if err := want("GET /healthz without a token", a, http.StatusOK, ""); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d requests to %d data routes without the data token (none, wrong, the control token, Basic, truncated) → 401 unauthorized with a Bearer challenge; /v1/stats unchanged (%+v); no session created; /healthz open",
		n, len(routes), after), nil
}

// checkControlAuth: R2. Every control route wants the control token; the
// data token does not open it; refused calls change nothing.
func checkControlAuth(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r2")
	routes := []struct {
		route, id string
		body      any
	}{
		{protocol.RouteControlCapabilities, "", nil},
		{protocol.RouteControlStatus, "", nil},
		{protocol.RouteControlPrepare, "", protocol.PrepareRequest{CheckpointID: k.checkpointID("k2"), Deadline: future()}},
		{protocol.RouteControlRetire, "", protocol.RetireRequest{RolloutID: id, Attempt: 4}},
		{protocol.RouteControlAuthorise, id, protocol.AuthoriseRequest{Attempt: 5}},
	}
	n := 0
	for _, authz := range []string{"", "Bearer " + k.cfg.DataToken, "Bearer wrong-" + k.prefix} {
		for _, r := range routes {
			a, err := k.do(ctx, r.route, r.id, authz, r.body)
			if err != nil {
				return "", err
			}
			if err := want(fmt.Sprintf("%s with Authorization %q", r.route, authz), a, http.StatusUnauthorized, protocol.CodeUnauthorized); err != nil {
				return "", err
			}
			n++
		}
	}
	if err := k.wantPhase(ctx, protocol.PhaseIdle, protocol.AdmissionOpen); err != nil {
		return "", fmt.Errorf("after refused control calls: %w", err)
	}
	// Neither the refused retire nor the refused authorise moved the fence:
	// attempt 0 is still a new rollout.
	if _, err := k.start(ctx, k.startReq(id, 0)); err != nil {
		return "", fmt.Errorf("after a refused authorise of attempt 5: %w", err)
	}
	var caps protocol.Capabilities
	a, err := k.control(ctx, protocol.RouteControlCapabilities, "", nil)
	if err != nil {
		return "", err
	}
	if err := decode("capabilities with the control token", a, &caps); err != nil {
		return "", err
	}
	disabled, err := k.controlDisabled(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d control requests without the control token (none, the data token, wrong) → 401 unauthorized; phase stayed idle, admission open; the fence did not move; capabilities with the control token → 200 (%s %q); %s",
		n, caps.Component, caps.Name, disabled), nil
}

// controlDisabled checks the instance started without a control token
// (Config.NoControlURL): every control route, with or without a token,
// answers 404 control_disabled, while its data plane answers.
func (k *kit) controlDisabled(ctx context.Context) (string, error) {
	if k.cfg.NoControlURL == "" {
		return "control_disabled not driven (no instance without a control token given: --no-control-url)", nil
	}
	other := *k
	other.cfg.URL = k.cfg.NoControlURL
	routes := []struct {
		route, id string
		body      any
	}{
		{protocol.RouteControlCapabilities, "", nil},
		{protocol.RouteControlStatus, "", nil},
		{protocol.RouteControlPrepare, "", protocol.PrepareRequest{CheckpointID: k.checkpointID("k2"), Deadline: future()}},
		{protocol.RouteControlResume, "", protocol.ResumeRequest{CheckpointID: k.checkpointID("k2")}},
		{protocol.RouteControlAuthorise, k.rollout("r2-off"), protocol.AuthoriseRequest{Attempt: 1}},
	}
	n := 0
	for _, authz := range []string{k.controlAuth(), ""} {
		for _, r := range routes {
			a, err := other.do(ctx, r.route, r.id, authz, r.body)
			if err != nil {
				return "", err
			}
			if err := want(fmt.Sprintf("%s at the instance without a control token (Authorization %q)", r.route, authz), a,
				http.StatusNotFound, protocol.CodeControlDisabled); err != nil {
				return "", err
			}
			n++
		}
	}
	a, err := other.do(ctx, protocol.RouteStats, "", k.dataAuth(), nil)
	if err != nil {
		return "", err
	}
	if err := want("GET /v1/stats at the instance without a control token", a, http.StatusOK, ""); err != nil {
		return "", err
	}
	k.errorsSeen, k.undocumented, k.serverErrors = other.errorsSeen, other.undocumented, other.serverErrors
	return fmt.Sprintf("at the instance without a control token, %d control requests (with the token and without) → 404 control_disabled, its data plane answers", n), nil
}
