package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// ExportSchemaVersion is the version of the export line format
// (docs/trajectory.schema.json); a reader refuses lines of a newer one.
const ExportSchemaVersion = 2

// ExportLine is one finished rollout as `starter export` writes it: one
// JSON line, documented by docs/trajectory.schema.json. Field names follow
// NeMo Gym's and vLLM's where they have one.
type ExportLine struct {
	SchemaVersion int    `json:"schema_version"`
	RolloutID     string `json:"rollout_id"`
	Set           string `json:"set"`
	// Group and Repeat are the dataset row and repeat index; null for a
	// rollout not submitted from a dataset.
	Group  *string `json:"group"`
	Repeat *int    `json:"repeat"`
	// GroupStatus says where the group stands (null outside a dataset):
	// train on a group's lines only when it is complete.
	GroupStatus *ExportGroup `json:"group_status"`
	Env         string       `json:"env"`
	// Status is "completed", or how the rollout failed: "failed",
	// "terminated", "timed_out", "canceled"; Failure says why.
	Status  string `json:"status"`
	Failure string `json:"failure,omitempty"`
	// Held: the result is held for acknowledgement (the set was submitted
	// with require-ack); Receipt acknowledges it (`starter acknowledge`).
	Held    bool             `json:"held"`
	Receipt *rollout.Receipt `json:"receipt,omitempty"`
	// Attempt is the attempt that finished; Attempts every attempt seen.
	Attempt  int             `json:"attempt"`
	Attempts []AttemptRecord `json:"attempts"`
	// Reward, Usage and the trajectory are null or empty for a rollout
	// that failed: it left no result.
	Reward        *float64       `json:"reward"`
	StepRewards   StepRewards    `json:"step_rewards"`
	VerifyDetails VerifyDetails  `json:"verify_details"`
	Usage         *rollout.Usage `json:"usage"`
	NumTurns      int            `json:"num_turns"`
	Terminated    bool           `json:"terminated"`
	Truncated     bool           `json:"truncated"`
	Head          string         `json:"head"`
	// Tokens is "present" when every assistant message carries token
	// ids, "absent" when none does, "partial" otherwise; PrefixBreaks
	// counts assistant messages flagged prefix_break.
	Tokens       string `json:"tokens"`
	PrefixBreaks int    `json:"prefix_breaks"`
	// GenerationTokens counts the generated tokens of the rollout's
	// captured model calls by how they were got; absent when no call
	// captured tokens (and in lines written before it was kept).
	GenerationTokens *GenerationTokens `json:"generation_tokens,omitempty"`
	Messages         []ExportMessage   `json:"messages"`
	Turns            []ExportTurn      `json:"turns"`
}

// GenerationTokens are a rollout's generated tokens: Generated were
// sampled by the calls that finished, Recovered kept from the durable
// prefix of a call a crash or a checkpoint cut and continued, Regenerated
// thrown away with a prefix that could not be continued (sampled again,
// so also in Generated). RegeneratedCalls counts the calls that started
// over.
type GenerationTokens struct {
	Generated        int `json:"generated"`
	Recovered        int `json:"recovered"`
	Regenerated      int `json:"regenerated"`
	RegeneratedCalls int `json:"regenerated_calls"`
}

// AttemptRecord is one attempt of a rollout as visibility shows it: its
// last run's status, and how many runs (continue-as-new segments) it took.
type AttemptRecord struct {
	Attempt int       `json:"attempt"`
	Status  string    `json:"status"`
	Runs    int       `json:"runs"`
	Start   time.Time `json:"start"`
	Close   time.Time `json:"close,omitzero"`
}

// StepRewards are the per-step rewards, when the rollout's result records
// them: one per environment operation (tool call or gym step, a refused one
// counting 0), in the order of the observation messages. Reason says why
// they are not available.
type StepRewards struct {
	Available bool      `json:"available"`
	Values    []float64 `json:"values"`
	Reason    string    `json:"reason,omitempty"`
}

// VerifyDetails are the environment's verdict details, when recorded.
type VerifyDetails struct {
	Available bool            `json:"available"`
	Details   json.RawMessage `json:"details"`
	Reason    string          `json:"reason,omitempty"`
}

// Why step rewards and verify details are missing: a rollout that failed
// has no result, and one that began before results kept them has neither.
const (
	notRecordedReason = "not recorded: the rollout began before results kept them"
	noResultReason    = "the rollout has no result"
)

// ExportMessage is one chat message in OpenAI's shape; an assistant
// message also carries its model call's token fields in NeMo Gym's names
// (prompt_token_ids, generation_token_ids, generation_log_probs), or
// tokens "absent".
type ExportMessage struct {
	Role       string           `json:"role"`
	Content    string           `json:"content"`
	ToolCalls  []ExportToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
	// Tokens is "present", "absent" (the endpoint reported none, or the
	// call left no generation record) or "not_requested" (capture off).
	Tokens             string          `json:"tokens,omitempty"`
	PromptTokenIDs     []int64         `json:"prompt_token_ids,omitempty"`
	GenerationTokenIDs []int64         `json:"generation_token_ids,omitempty"`
	GenerationLogProbs []float64       `json:"generation_log_probs,omitempty"`
	FinishReason       string          `json:"finish_reason,omitempty"`
	ReasoningContent   string          `json:"reasoning_content,omitempty"`
	PolicyVersion      string          `json:"policy_version,omitempty"`
	PrefixBreak        *bool           `json:"prefix_break,omitempty"`
	PrefixBreakReason  string          `json:"prefix_break_reason,omitempty"`
	Sampling           json.RawMessage `json:"sampling,omitempty"`
	// PolicyVersionSpans: the first generated token each policy version
	// sampled, when the weights changed between a durable prefix and its
	// continuation (absent when one version sampled it all).
	PolicyVersionSpans []transcript.VersionSpan `json:"policy_version_spans,omitempty"`
	// ResumedAt are the generated-token indexes where the call continued
	// from its durable prefix after a crash or a checkpoint cut it;
	// Regenerated says it had a prefix it could not continue and started
	// over.
	ResumedAt   []int `json:"resumed_at,omitempty"`
	Regenerated bool  `json:"regenerated,omitempty"`
}

// ExportToolCall is a tool call in OpenAI's shape.
type ExportToolCall struct {
	ID       string             `json:"id"`
	Type     string             `json:"type"`
	Function ExportFunctionCall `json:"function"`
}

// ExportFunctionCall names the function and its JSON arguments.
type ExportFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ExportTurn is one model call and what the environment answered:
// indexes into Messages.
type ExportTurn struct {
	Turn         int   `json:"turn"`
	Assistant    int   `json:"assistant"`
	Observations []int `json:"observations"`
}

// TranscriptReader reads what a rollout's result points to; a
// OpenTranscripts opens one.
type TranscriptReader interface {
	Load(ctx context.Context, head transcript.Digest) ([]transcript.Item, error)
	Generation(ctx context.Context, d transcript.Digest) (transcript.Generation, error)
	Get(ctx context.Context, d transcript.Digest) ([]byte, error)
}

// finishedRollout is what the exporter knows of a finished rollout
// before reading its transcript.
type finishedRollout struct {
	set         string
	rec         RolloutRecord
	group       *string
	repeat      *int
	groupStatus *ExportGroup
	attempts    []AttemptRecord
}

// buildLine builds the export line of f, reading its transcript from
// store.
func buildLine(ctx context.Context, store TranscriptReader, f finishedRollout) (ExportLine, error) {
	rec := f.rec
	line := ExportLine{
		SchemaVersion: ExportSchemaVersion,
		RolloutID:     rec.RolloutID,
		Set:           f.set,
		Env:           rec.Env,
		Group:         f.group, Repeat: f.repeat, GroupStatus: f.groupStatus,
		Status:        exportStatus(rec),
		Failure:       rec.Err,
		Attempt:       int(rec.Attempt),
		Attempts:      f.attempts,
		StepRewards:   StepRewards{Reason: noResultReason},
		VerifyDetails: VerifyDetails{Reason: noResultReason},
		Tokens:        transcript.TokensAbsent,
		Messages:      []ExportMessage{},
		Turns:         []ExportTurn{},
	}
	res := rec.Result
	if res == nil {
		return line, nil
	}
	line.Set, line.Env, line.Attempt, line.Receipt = res.Set, res.Env, res.Attempt, res.Receipt
	line.Held = !rec.Closed()
	reward, usage := res.Reward, res.Usage
	line.Reward, line.Usage = &reward, &usage
	line.NumTurns, line.Terminated, line.Truncated, line.Head = res.Turns, res.Terminated, res.Truncated, string(res.Head)
	if err := addDetails(ctx, store, &line, res); err != nil {
		return line, fmt.Errorf("rollout %s: %w", rec.RolloutID, err)
	}
	items, err := store.Load(ctx, res.Head)
	if errors.Is(err, transcript.ErrNotFound) {
		err = fmt.Errorf("%w; %w", err, errStoreMissing)
	}
	if err != nil {
		return line, fmt.Errorf("transcript of rollout %s (head %s): %w", rec.RolloutID, res.Head, err)
	}
	if err := addMessages(ctx, store, &line, items); err != nil {
		return line, fmt.Errorf("rollout %s: %w", rec.RolloutID, err)
	}
	addRecovery(&line, items, res.Lineage)
	return line, nil
}

// addRecovery copies each captured call's recovery from the lineage (which
// keeps where a cut call resumed; its generation record does not, so a
// recovered call's record is an uninterrupted one's) to its message, and
// sums the line's generated tokens.
func addRecovery(line *ExportLine, items []transcript.Item, lineage []rollout.LineageEntry) {
	byGen := map[transcript.Digest]rollout.LineageEntry{}
	for _, e := range lineage {
		if e.Generation != "" {
			byGen[e.Generation] = e
		}
	}
	var sum GenerationTokens
	captured := false
	for i, it := range items {
		m := &line.Messages[i]
		if it.Role != "assistant" || it.Generation == "" {
			continue
		}
		captured = true
		sum.Generated += len(m.GenerationTokenIDs)
		e, ok := byGen[it.Generation]
		if !ok {
			continue
		}
		r := e.GenerationRecovery
		m.ResumedAt, m.Regenerated = r.ResumedAt, r.Regenerated
		sum.Generated -= min(r.TokensRecovered, len(m.GenerationTokenIDs))
		sum.Recovered += r.TokensRecovered
		sum.Regenerated += r.TokensRegenerated
		if r.Regenerated {
			sum.RegeneratedCalls++
		}
	}
	if captured {
		line.GenerationTokens = &sum
	}
}

// addDetails fills the step rewards and the verifier's details the result
// records.
func addDetails(ctx context.Context, store TranscriptReader, line *ExportLine, res *rollout.Result) error {
	line.StepRewards = StepRewards{Reason: notRecordedReason}
	if res.StepRewards != nil {
		line.StepRewards = StepRewards{Available: true, Values: res.StepRewards}
	}
	line.VerifyDetails = VerifyDetails{Reason: notRecordedReason}
	if res.VerifyDetailsRef == "" {
		return nil
	}
	details, err := store.Get(ctx, res.VerifyDetailsRef)
	if err != nil {
		return fmt.Errorf("verify details %s: %w", res.VerifyDetailsRef, err)
	}
	if !json.Valid(details) {
		return fmt.Errorf("verify details %s are not JSON", res.VerifyDetailsRef)
	}
	line.VerifyDetails = VerifyDetails{Available: true, Details: details}
	return nil
}

// addMessages converts items to messages and turns, and fills the
// line's token summary.
func addMessages(ctx context.Context, store TranscriptReader, line *ExportLine, items []transcript.Item) error {
	withTokens, assistants := 0, 0
	for i, it := range items {
		m := ExportMessage{Role: it.Role, Content: it.Content, ToolCallID: it.ToolCallID}
		for _, tc := range it.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ExportToolCall{ID: tc.ID, Type: "function", Function: ExportFunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
		}
		switch {
		case it.Role == "assistant":
			assistants++
			if err := addTokens(ctx, store, &m, it.Generation); err != nil {
				return err
			}
			if m.Tokens == transcript.TokensPresent {
				withTokens++
			}
			if *m.PrefixBreak {
				line.PrefixBreaks++
			}
			line.Turns = append(line.Turns, ExportTurn{Turn: assistants, Assistant: i, Observations: []int{}})
		case len(line.Turns) > 0:
			// Everything after a model call until the next one is what
			// the environment answered.
			t := &line.Turns[len(line.Turns)-1]
			t.Observations = append(t.Observations, i)
		}
		line.Messages = append(line.Messages, m)
	}
	switch {
	case assistants > 0 && withTokens == assistants:
		line.Tokens = transcript.TokensPresent
	case withTokens > 0:
		line.Tokens = "partial"
	}
	return nil
}

// addTokens copies an assistant message's generation record into m; a
// message without one has tokens "absent".
func addTokens(ctx context.Context, store TranscriptReader, m *ExportMessage, d transcript.Digest) error {
	brk := false
	m.PrefixBreak, m.Tokens = &brk, transcript.TokensAbsent
	if d == "" {
		return nil
	}
	g, err := store.Generation(ctx, d)
	if err != nil {
		return fmt.Errorf("generation record %s: %w", d, err)
	}
	m.Tokens = g.Tokens
	m.PromptTokenIDs, m.GenerationTokenIDs, m.GenerationLogProbs = g.PromptTokenIDs, g.GenerationTokenIDs, g.GenerationLogProbs
	m.FinishReason, m.ReasoningContent, m.PolicyVersion = g.FinishReason, g.ReasoningContent, g.PolicyVersion
	brk = g.PrefixBreak
	m.PrefixBreakReason, m.Sampling = g.PrefixBreakReason, g.Sampling
	m.PolicyVersionSpans = g.PolicyVersionSpans
	return nil
}

// Outcome names a finished rollout's status as the export does:
// "completed" (held results included), "failed", "terminated", "timed_out"
// or "canceled".
func (r RolloutRecord) Outcome() string { return exportStatus(r) }

// exportStatus names a finished rollout's status in the export: a
// running run holding its result has completed.
func exportStatus(rec RolloutRecord) string {
	if !rec.Closed() && rec.Result != nil {
		return "completed"
	}
	return closedStatus(rec.Status)
}

// closedStatus names a closed run's status.
func closedStatus(s enumspb.WorkflowExecutionStatus) string {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "completed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return "failed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "terminated"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "timed_out"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "canceled"
	}
	return "unknown"
}

// errStoreMissing explains a transcript that is not in the store.
var errStoreMissing = errors.New("is --transcript-dir (TURNSTILE_TRANSCRIPT_DIR) the worker's transcript directory?")

// OpenTranscripts opens the transcript store the workers write to (their
// TURNSTILE_TRANSCRIPT_DIR: a directory, or an object-store URL such as
// s3://bucket/prefix?region=…), for Export to read.
func OpenTranscripts(ctx context.Context, location string) (TranscriptReader, error) {
	return transcriptstore.OpenLocation(ctx, &storage.Opener{}, location)
}
