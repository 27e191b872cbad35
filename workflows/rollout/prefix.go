package rollout

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/internal/transcript"
)

// Values of PolicyRef.Continue.
const (
	// ContinueAuto (or empty): a cut model call continues from its durable
	// token prefix through the endpoint's token-in route, when the endpoint
	// has one (found out by the first continuation, and remembered) and
	// the policy names a tool parser; otherwise it starts over, and its
	// lineage entry says regenerated.
	ContinueAuto = "auto"
	// ContinueNever: a cut model call always starts over (regenerated).
	ContinueNever = "never"
)

// Values of PolicyRef.ToolParser.
const (
	// ToolParserHermes reads Hermes-style answers (Qwen, Hermes, …): an
	// optional <think>…</think> reasoning block, the content, then each
	// tool call as a <tool_call>{"name": …, "arguments": …}</tool_call>
	// block.
	ToolParserHermes = "hermes"
	// ToolParserTurnstile reads the scripted policy server's toy template.
	ToolParserTurnstile = "turnstile"
)

// validateContinue checks the policy's prefix settings.
func (p PolicyRef) validateContinue() error {
	switch p.Continue {
	case "", ContinueAuto, ContinueNever:
	default:
		return fmt.Errorf("policy.continue %q: want %q or %q", p.Continue, ContinueAuto, ContinueNever)
	}
	switch p.ToolParser {
	case "", ToolParserHermes, ToolParserTurnstile:
	default:
		return fmt.Errorf("policy.tool_parser %q: want %q, %q or empty", p.ToolParser, ToolParserHermes, ToolParserTurnstile)
	}
	return nil
}

// CheckContinue checks the prefix settings of a policy an activity got.
func CheckContinue(p PolicyRef) error {
	if err := p.validateContinue(); err != nil {
		return BadInput("%v", err)
	}
	return nil
}

// ModelPrefix names the durable token prefix of an unfinished model call:
// the last chunk of its chain in the transcript store and how many
// generated tokens the chain holds. The model activity heartbeats it as it
// makes the prefix durable, and a call cut by a checkpoint's deadline
// reports it as its cancellation's details; only this, never a token,
// travels through workflow history.
type ModelPrefix struct {
	CallID string            `json:"call_id"`
	Turn   int               `json:"turn"`
	Record transcript.Digest `json:"record"`
	Tokens int               `json:"tokens"`
}

// Validate checks a prefix a call was given.
func (p *ModelPrefix) Validate() error {
	if p.Tokens <= 0 {
		return fmt.Errorf("model prefix of %s holds %d tokens", p.CallID, p.Tokens)
	}
	return p.Record.Validate()
}

// GenerationRecovery says how a model call that a crash or a checkpoint cut
// was recovered. It depends on where the cut fell, so it lives in the
// lineage and never in the generation record (whose digest is part of the
// conversation's head): a recovered call's answer and tokens are those of
// an uninterrupted one.
type GenerationRecovery struct {
	// ResumedAt are the indexes of the generated tokens where a request
	// continued the generation from its durable prefix.
	ResumedAt []int `json:"resumed_at,omitempty"`
	// TokensRecovered counts the generated tokens the call kept from the
	// prefix it continued from.
	TokensRecovered int `json:"tokens_recovered,omitempty"`
	// Regenerated: the call had a durable prefix and could not continue it
	// (continue "never", no token-in route, no tool parser, a prefix of
	// another conversation), so it started over; TokensRegenerated counts
	// the prefix's tokens it threw away.
	Regenerated       bool `json:"regenerated,omitempty"`
	TokensRegenerated int  `json:"tokens_regenerated,omitempty"`
}

// cutSettle bounds how long a call cancelled at the park deadline is waited
// for: it reports at its next heartbeat, or when its heartbeat times out
// (a dead worker), whichever comes first.
const cutSettle = 15 * time.Second

// settleCut waits for the model call cancelled at the park deadline to
// settle: a call that kept a durable prefix reports it as its
// cancellation's details (or, when its worker died, as its timeout's last
// heartbeat), and the boundary keeps it as Partial; a call that finished
// first is committed (answered).
func (r *rollout) settleCut(ctx workflow.Context, fut workflow.Future, turn int) (answered bool, err error) {
	ok, err := workflow.AwaitWithTimeout(ctx, cutSettle, fut.IsReady)
	if err != nil || !ok {
		return false, err
	}
	var res CallModelResult
	callErr := fut.Get(ctx, &res)
	if callErr == nil {
		r.commitAnswer(turn, res)
		return true, nil
	}
	if p := cutPrefix(callErr); p != nil && p.Turn == turn && p.Validate() == nil {
		r.b.Partial = p
	}
	return false, nil
}

// cutPrefix is the durable prefix a cancelled or timed-out model call
// reported, or nil.
func cutPrefix(err error) *ModelPrefix {
	var p ModelPrefix
	var canceled *temporal.CanceledError
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &canceled) && canceled.HasDetails():
		if canceled.Details(&p) != nil {
			return nil
		}
	case errors.As(err, &timeout) && timeout.HasLastHeartbeatDetails():
		if timeout.LastHeartbeatDetails(&p) != nil {
			return nil
		}
	default:
		return nil
	}
	return &p
}
