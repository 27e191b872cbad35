package environment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/heartbeat"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// envHeartbeatWhile keeps an environment operation run as a regular activity
// alive: it heartbeats at a third of its heartbeat timeout (a call shorter
// than that costs the server no heartbeat at all), so a worker that dies in
// the call is noticed after the heartbeat timeout, not the start-to-close. A
// local activity cannot heartbeat (a dead worker is noticed by the workflow
// task timeout instead) and one without a heartbeat timeout need not.
func envHeartbeatWhile(ctx context.Context) (stop func()) {
	info := activity.GetInfo(ctx)
	if info.IsLocalActivity || info.HeartbeatTimeout <= 0 {
		return func() {}
	}
	return heartbeat.Every(ctx, max(info.HeartbeatTimeout/3, 10*time.Millisecond))
}

// StartEnvironment seeds the rollout's session at the environment server and
// stores the beginning of the conversation (instructions, first observation)
// and the tool schema in the transcript store.
func (a *Activities) StartEnvironment(ctx context.Context, in rollout.StartEnvironmentInput) (rollout.StartEnvironmentResult, error) {
	defer envHeartbeatWhile(ctx)()
	if err := rollout.CheckIdentity(in.RolloutID, in.Attempt); err != nil {
		return rollout.StartEnvironmentResult{}, err
	}
	if in.Env.Name == "" {
		return rollout.StartEnvironmentResult{}, rollout.BadInput("rollout %s: empty environment name", in.RolloutID)
	}
	if g := in.Retry; g != nil && (g.RolloutID != in.RolloutID || g.Attempt != in.Attempt || g.Attempt < 1) {
		return rollout.StartEnvironmentResult{}, rollout.BadInput("rollout %s attempt %d: the group grant is for %s attempt %d", in.RolloutID, in.Attempt, g.RolloutID, g.Attempt)
	}
	if err := a.checkFence(ctx, in); err != nil {
		return rollout.StartEnvironmentResult{}, err
	}
	server, err := a.server(in.Env)
	if err != nil {
		return rollout.StartEnvironmentResult{}, err
	}
	store, err := a.store()
	if err != nil {
		return rollout.StartEnvironmentResult{}, err
	}

	resp, err := a.startSession(ctx, server, in)
	if err != nil {
		return rollout.StartEnvironmentResult{}, err
	}

	style := resp.Spec.Style
	if style == "" {
		// An environment that declares no style is driven with tools, the
		// common case; the tool list tells the model what it may do.
		style = envs.StyleTools
	}
	if err := rollout.CheckStyle(style); err != nil {
		return rollout.StartEnvironmentResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("environment %s declares an unknown style %q", in.Env.Name, resp.Spec.Style), rollout.ErrEnvironment, nil)
	}

	var items []transcript.Item
	if resp.Start.Instructions != "" {
		items = append(items, transcript.Item{Role: "system", Content: resp.Start.Instructions})
	}
	items = append(items, transcript.Item{Role: "user", Content: resp.Start.Observation})
	head, err := store.AppendAll(ctx, "", items...)
	if err != nil {
		return rollout.StartEnvironmentResult{}, rollout.StoreError("store start of "+in.RolloutID, err)
	}
	tools := resp.Spec.Tools
	if tools == nil {
		tools = []envs.Tool{} // "[]", not "null": equal specs, equal digests
	}
	toolsDigest, err := store.PutJSON(ctx, tools)
	if err != nil {
		return rollout.StartEnvironmentResult{}, rollout.StoreError("store tools of "+in.RolloutID, err)
	}
	return rollout.StartEnvironmentResult{
		Head:     head,
		Tools:    toolsDigest,
		Revision: resp.Revision,
		Style:    style,
		Mode:     envs.EffectiveMode(resp.Spec.Mode),
	}, nil
}

// startSession sends the start of in's attempt to server. A
// start-over no restore installed (a restart-only environment's rollout
// started again, a retried group member) is refused attempt_not_installed:
// only the control plane may install the attempt, so it is authorised there
// and the start sent again. A restore installs its attempts itself, so a
// restored start-over goes through at once.
func (a *Activities) startSession(ctx context.Context, server destination.Target, in rollout.StartEnvironmentInput) (protocol.StartResponse, error) {
	req := protocol.StartRequest{
		Identity: protocol.Identity{
			RolloutID: in.RolloutID,
			Attempt:   in.Attempt,
			RequestID: protocol.SeedRequestID(in.RolloutID),
		},
		Env:  in.Env.Name,
		Seed: in.Seed,
		Task: in.Task,
	}
	resp, err := a.envClient(server).Start(ctx, req)
	if in.Attempt > 0 && remoteCode(err) == protocol.CodeAttemptNotInstalled {
		if err := a.AuthoriseAttempt(ctx, rollout.AuthoriseAttemptInput{RolloutID: in.RolloutID, Attempt: in.Attempt, Env: in.Env}); err != nil {
			return protocol.StartResponse{}, err
		}
		resp, err = a.envClient(server).Start(ctx, req)
	}
	if err != nil {
		return protocol.StartResponse{}, envError("start "+in.RolloutID, err)
	}
	return resp, nil
}

// AuthoriseAttempt installs in.Attempt of in.RolloutID on its environment
// server through the control plane (POST /v1/control/sessions/{id}/authorise),
// so that a data-plane start of that attempt begins a fresh episode: the
// data plane can never install an attempt itself (RULES.md R7, R8). Every
// path that starts a rollout over as a higher attempt goes through here;
// StartEnvironment calls it when the server answers attempt_not_installed.
// It is idempotent. A newer attempt already installed fails it with
// ErrStaleAttempt; a checkpoint in progress with ErrParked (wait, retry).
func (a *Activities) AuthoriseAttempt(ctx context.Context, in rollout.AuthoriseAttemptInput) error {
	if err := rollout.CheckIdentity(in.RolloutID, in.Attempt); err != nil {
		return err
	}
	op := fmt.Sprintf("authorise attempt %d of %s", in.Attempt, in.RolloutID)
	server, err := a.controlServer(in.Env)
	if err != nil {
		return err
	}
	if server.Secret == "" {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"environment %s: %s at %s: this worker has no control token (%s) to install a start-over's attempt",
			op, in.RolloutID, server.URL, protocol.ControlTokenEnvVar), rollout.ErrEnvironment, nil)
	}
	_, err = protocol.NewControlClient(server.URL, server.Secret, a.HTTPClient).Authorise(ctx, in.RolloutID, in.Attempt)
	if remoteCode(err) == protocol.CodeInvalidPhase {
		// A committed cut or a restore holds the server: the workflow
		// waits at its boundary and sends the start again.
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("environment %s: %v", op, err), rollout.ErrParked, nil)
	}
	if err != nil {
		return envError(op, err)
	}
	return nil
}

// envClient is the data-plane client of server, with its data token when
// the worker has one for it.
func (a *Activities) envClient(server destination.Target) *protocol.Client {
	if server.Secret == "" {
		return protocol.NewClient(server.URL, a.HTTPClient)
	}
	return protocol.NewDataClient(server.URL, server.Secret, a.HTTPClient)
}

// remoteCode is the protocol error code of err, or "".
func remoteCode(err error) string {
	var re *protocol.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

// OperateEnvironment applies one tool call (or gym step) at the environment
// server and appends what the model should see next to the transcript: the
// observation, or the environment's refusal.
func (a *Activities) OperateEnvironment(ctx context.Context, in rollout.OperateEnvironmentInput) (rollout.OperateEnvironmentResult, error) {
	defer envHeartbeatWhile(ctx)()
	if err := rollout.CheckIdentity(in.RolloutID, in.Attempt); err != nil {
		return rollout.OperateEnvironmentResult{}, err
	}
	if in.RequestID == "" {
		return rollout.OperateEnvironmentResult{}, rollout.BadInput("rollout %s: empty request id", in.RolloutID)
	}
	if err := rollout.CheckStyle(in.Style); err != nil {
		return rollout.OperateEnvironmentResult{}, err
	}
	if err := rollout.CheckDigest("operate "+in.RequestID+": head", in.Head); err != nil {
		return rollout.OperateEnvironmentResult{}, err
	}
	server, err := a.server(in.Env)
	if err != nil {
		return rollout.OperateEnvironmentResult{}, err
	}
	store, err := a.store()
	if err != nil {
		return rollout.OperateEnvironmentResult{}, err
	}

	args := strings.TrimSpace(in.Call.Arguments)
	if args == "" {
		// Models commonly send no arguments at all for a tool without
		// parameters; that means the empty object.
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		// The model's mistake, not the environment's: show it to the model
		// like any refusal, and do not bother the server with it.
		return a.refuse(ctx, store, in, envs.CodeBadArguments,
			fmt.Sprintf("arguments of %s are not valid JSON: %s", in.Call.Name, rollout.Truncate(in.Call.Arguments, 200)))
	}

	resp, err := a.envClient(server).Operate(ctx, protocol.OperateRequest{
		Identity: protocol.Identity{
			RolloutID: in.RolloutID,
			Attempt:   in.Attempt,
			RequestID: in.RequestID,
		},
		ExpectedRevision: in.ExpectedRevision,
		Tool:             in.Call.Name,
		Arguments:        json.RawMessage(args),
	})
	if err != nil {
		var re *protocol.RemoteError
		if errors.As(err, &re) && re.Status == http.StatusUnprocessableEntity {
			res, err := a.refuse(ctx, store, in, re.Code, re.Message)
			if err == nil {
				a.Failpoints.Hit(failpoint.WorkerEnvAppliedBeforeReport)
			}
			return res, err
		}
		return rollout.OperateEnvironmentResult{}, envError("operate "+in.RequestID, err)
	}

	a.Failpoints.Hit(failpoint.WorkerEnvAppliedBeforeTranscript)
	head, err := store.Append(ctx, in.Head, observationItem(in, resp.Outcome.Observation))
	if err != nil {
		return rollout.OperateEnvironmentResult{}, rollout.StoreError("store observation of "+in.RequestID, err)
	}
	a.Failpoints.Hit(failpoint.WorkerEnvAppliedBeforeReport)
	return rollout.OperateEnvironmentResult{
		Head:       head,
		Revision:   resp.Revision,
		Reward:     resp.Outcome.Reward,
		Terminated: resp.Outcome.Terminated,
		Truncated:  resp.Outcome.Truncated,
		Replayed:   resp.Replayed,
	}, nil
}

// refuse records a refusal as what the model sees next; the environment's
// state, and so the revision, is unchanged.
func (a *Activities) refuse(ctx context.Context, store *transcriptstore.Store, in rollout.OperateEnvironmentInput, code, message string) (rollout.OperateEnvironmentResult, error) {
	refusal := code + ": " + message
	head, err := store.Append(ctx, in.Head, observationItem(in, "error: "+refusal))
	if err != nil {
		return rollout.OperateEnvironmentResult{}, rollout.StoreError("store refusal of "+in.RequestID, err)
	}
	return rollout.OperateEnvironmentResult{
		Head:     head,
		Revision: in.ExpectedRevision,
		Refusal:  refusal,
	}, nil
}

// observationItem is how the model sees an operation's output: the answer to
// its tool call, or (gym style) the next user message.
func observationItem(in rollout.OperateEnvironmentInput, content string) transcript.Item {
	if in.Style == envs.StyleGym {
		return transcript.Item{Role: "user", Content: content}
	}
	return transcript.Item{Role: "tool", ToolCallID: in.Call.ID, Content: content}
}

// Verify scores the finished episode; the server retires the session.
func (a *Activities) Verify(ctx context.Context, in rollout.VerifyInput) (rollout.VerifyResult, error) {
	defer envHeartbeatWhile(ctx)()
	if err := rollout.CheckIdentity(in.RolloutID, in.Attempt); err != nil {
		return rollout.VerifyResult{}, err
	}
	server, err := a.server(in.Env)
	if err != nil {
		return rollout.VerifyResult{}, err
	}
	requestID := in.RequestID
	if requestID == "" {
		requestID = protocol.VerifyRequestID(in.RolloutID)
	}
	resp, err := a.envClient(server).Verify(ctx, protocol.VerifyRequest{
		Identity: protocol.Identity{
			RolloutID: in.RolloutID,
			Attempt:   in.Attempt,
			RequestID: requestID,
		},
		ExpectedRevision: in.ExpectedRevision,
	})
	if err != nil {
		return rollout.VerifyResult{}, envError("verify "+in.RolloutID, err)
	}
	if !in.StoreDetails {
		return rollout.VerifyResult{Reward: resp.Verdict.Reward, Details: resp.Verdict.Details}, nil
	}
	ref, err := a.storeDetails(ctx, in.RolloutID, resp.Verdict.Details)
	if err != nil {
		return rollout.VerifyResult{}, err
	}
	return rollout.VerifyResult{Reward: resp.Verdict.Reward, DetailsRef: ref}, nil
}

// storeDetails puts a verdict's details in the transcript store as they
// came ("null" when there are none): a replayed verify gets the same
// bytes, so a recovered rollout names the same blob.
func (a *Activities) storeDetails(ctx context.Context, rolloutID string, details json.RawMessage) (transcript.Digest, error) {
	store, err := a.store()
	if err != nil {
		return "", err
	}
	if len(details) == 0 {
		details = json.RawMessage("null")
	}
	ref, err := store.Put(ctx, details)
	if err != nil {
		return "", rollout.StoreError("store verify details of "+rolloutID, err)
	}
	return ref, nil
}

// envError maps an environment server failure to what the workflow must do:
// stop (stale attempt), wait and re-send (parked), give up (a refusal no
// retry can fix), or let Temporal retry (5xx, network, a lost session).
func envError(op string, err error) error {
	var re *protocol.RemoteError
	if !errors.As(err, &re) {
		return fmt.Errorf("environment %s: %w", op, err)
	}
	msg := fmt.Sprintf("environment %s: %d %s: %s", op, re.Status, re.Code, re.Message)
	switch {
	case re.Status == http.StatusConflict && re.Code == protocol.CodeStaleAttempt:
		return temporal.NewNonRetryableApplicationError(msg, rollout.ErrStaleAttempt, nil)
	case re.Status == http.StatusServiceUnavailable && re.Code == protocol.CodeParked:
		// The workflow, not Temporal, waits and re-sends the same request id,
		// so the rollout can park at its boundary meanwhile.
		return temporal.NewNonRetryableApplicationError(msg, rollout.ErrParked, nil)
	case re.Status == http.StatusRequestTimeout || re.Status == http.StatusTooManyRequests || re.Status >= 500:
		return fmt.Errorf("environment %s: %w", op, err)
	case re.Status == http.StatusNotFound && re.Code == protocol.CodeUnknownSession,
		re.Status == http.StatusConflict && re.Code == protocol.CodeAttemptNotInstalled:
		// The server lost the session (restarted empty at its address): a
		// recovery may be moving this rollout to a restored server right
		// now, so the call is retried, within its budget, until then. An
		// attempt above 0 sees the same loss as attempt_not_installed: the
		// empty server knows no rollout, so none has an attempt above 0
		// installed there.
		return temporal.NewApplicationError(msg, rollout.ErrSessionLost)
	default:
		return temporal.NewNonRetryableApplicationError(msg, rollout.ErrEnvironment, nil)
	}
}
