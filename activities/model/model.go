package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/heartbeat"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// ErrModelUnavailable is the type of a retryable model failure (429, 5xx)
// that carries the server's Retry-After as the next retry delay.
const ErrModelUnavailable = "ModelUnavailable"

// CallModel asks the policy for the next message of the conversation at
// in.Head, stores the answer and returns the new head and the tool calls (in
// gym style, the action as one step call).
func (a *Activities) CallModel(ctx context.Context, in rollout.CallModelInput) (rollout.CallModelResult, error) {
	if err := checkCallModelInput(in); err != nil {
		return rollout.CallModelResult{}, err
	}
	store, err := a.store()
	if err != nil {
		return rollout.CallModelResult{}, err
	}
	callID := rollout.ModelCallID(in.RolloutID, in.Attempt, in.Turn)
	params, items, err := buildRequest(ctx, store, in, callID)
	if err != nil {
		return rollout.CallModelResult{}, err
	}
	endpoint, err := a.endpoint(in.Policy, callID)
	if err != nil {
		return rollout.CallModelResult{}, err
	}
	var g generated
	if in.Sampling != nil && in.Sampling.CaptureTokens {
		g, err = a.callStreamed(ctx, store, in, callID, endpoint, params)
	} else {
		g, err = a.callWhole(ctx, callID, endpoint, params)
	}
	if err != nil {
		return rollout.CallModelResult{}, err
	}
	if err := a.checkToolCalls(len(g.calls), callID, params.Model, endpoint.URL); err != nil {
		return rollout.CallModelResult{}, err
	}
	answer, calls, err := answerOf(in.Style, in.Turn, g.content, g.calls, callID)
	if err != nil {
		return rollout.CallModelResult{}, err
	}
	a.Failpoints.Hit(failpoint.WorkerModelAnsweredBeforeTranscript)
	gen, err := recordGeneration(ctx, store, in, items, g)
	if err != nil {
		return rollout.CallModelResult{}, rollout.StoreError("store generation record of "+callID, err)
	}
	if gen != nil {
		answer.Generation = gen.Record
	}

	head, err := store.Append(ctx, in.Head, answer)
	if err != nil {
		return rollout.CallModelResult{}, rollout.StoreError("store answer of "+callID, err)
	}
	a.Failpoints.Hit(failpoint.WorkerModelAnsweredBeforeReport)
	return rollout.CallModelResult{PendingCall: rollout.PendingCall{
		CallID:       callID,
		Parent:       in.Parent,
		Head:         head,
		ToolCalls:    calls,
		FinishReason: g.finish,
		Usage:        g.usage,
	}, Generation: gen}, nil
}

// callWhole is a model call without token capture: one request, its whole
// answer at once, as calls were made before prefixes were kept.
func (a *Activities) callWhole(ctx context.Context, callID string, endpoint destination.Target, params openai.ChatCompletionNewParams) (generated, error) {
	completion, header, err := a.complete(ctx, callID, endpoint, params)
	if err != nil {
		return generated{}, err
	}
	choice := completion.Choices[0]
	g := generated{content: choice.Message.Content, finish: choice.FinishReason, tok: parseTokens(modelAnswer{completion: completion, header: header})}
	g.reasoning = g.tok.reasoning
	for _, tc := range choice.Message.ToolCalls {
		g.calls = append(g.calls, transcript.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	g.usage = rollout.Usage{
		PromptTokens:     completion.Usage.PromptTokens,
		CompletionTokens: completion.Usage.CompletionTokens,
		TotalTokens:      completion.Usage.TotalTokens,
		Calls:            1,
	}
	return g, nil
}

// checkCallModelInput rejects what no retry can fix, before anything is
// loaded or sent.
func checkCallModelInput(in rollout.CallModelInput) error {
	if err := rollout.CheckIdentity(in.RolloutID, in.Attempt); err != nil {
		return err
	}
	if in.Turn < 0 {
		return rollout.BadInput("rollout %s: negative turn %d", in.RolloutID, in.Turn)
	}
	if err := rollout.CheckStyle(in.Style); err != nil {
		return err
	}
	if err := rollout.CheckDigest("call model: head", in.Head); err != nil {
		return err
	}
	if in.Policy.Model == "" {
		return rollout.BadInput("rollout %s: empty policy model name", in.RolloutID)
	}
	if err := in.Sampling.Validate(); err != nil {
		return rollout.BadInput("rollout %s: %v", in.RolloutID, err)
	}
	return rollout.CheckContinue(in.Policy)
}

// buildRequest loads the conversation at in.Head and, in tools style, the
// offered tools, and builds the chat request from them. A stored transcript
// or tool list that cannot be mapped is not retried: it will not change.
func buildRequest(ctx context.Context, store *transcriptstore.Store, in rollout.CallModelInput, callID string) (openai.ChatCompletionNewParams, []transcript.Item, error) {
	items, err := store.Load(ctx, in.Head)
	if err != nil {
		return openai.ChatCompletionNewParams{}, nil, rollout.StoreError("load conversation of "+callID, err)
	}
	params, err := requestOf(ctx, store, in, items, callID)
	return params, items, err
}

// requestOf builds the chat request of the conversation items.
func requestOf(ctx context.Context, store *transcriptstore.Store, in rollout.CallModelInput, items []transcript.Item, callID string) (openai.ChatCompletionNewParams, error) {
	messages, err := chatMessages(items)
	if err != nil {
		return openai.ChatCompletionNewParams{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("conversation %s of %s: %v", in.Head, callID, err), rollout.ErrTranscript, nil)
	}
	params := openai.ChatCompletionNewParams{
		Model:    in.Policy.Model,
		Messages: messages,
		Seed:     openai.Int(in.Seed),
	}
	applySampling(in.Sampling, &params)
	if in.Style != envs.StyleTools {
		return params, nil
	}
	if err := rollout.CheckDigest("call model: tools", in.Tools); err != nil {
		return openai.ChatCompletionNewParams{}, err
	}
	var tools []envs.Tool
	if err := store.GetJSON(ctx, in.Tools, &tools); err != nil {
		return openai.ChatCompletionNewParams{}, rollout.StoreError("load tools of "+callID, err)
	}
	if params.Tools, err = chatTools(tools); err != nil {
		return openai.ChatCompletionNewParams{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("tools %s of %s: %v", in.Tools, callID, err), rollout.ErrTranscript, nil)
	}
	return params, nil
}

// endpoint resolves the policy's model endpoint (by name, by URL, or the
// worker's default) before anything is sent: one the operator did not
// configure is refused, non-retryably.
func (a *Activities) endpoint(p rollout.PolicyRef, callID string) (destination.Target, error) {
	t, err := a.destinations().Model(p.Endpoint, p.BaseURL)
	if err != nil {
		return destination.Target{}, rollout.DestinationRefused(fmt.Errorf("%s: %w", callID, err))
	}
	if t.Secret == "" {
		t.Secret = a.APIKey
	}
	return t, nil
}

// complete sends the request to the model endpoint, heartbeating while it
// waits, and returns a completion with at least one choice. Its response
// headers are returned too: an endpoint may report the policy version in
// one.
func (a *Activities) complete(ctx context.Context, callID string, endpoint destination.Target, params openai.ChatCompletionNewParams) (*openai.ChatCompletion, http.Header, error) {
	baseURL := endpoint.URL
	client := a.modelClient(endpoint)
	stop := a.heartbeatWhile(ctx, callID)
	var resp *http.Response
	completion, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
	stop()
	if err != nil {
		return nil, nil, modelError(ctx, callID, params.Model, baseURL, err, a.retryLimit(ctx))
	}
	if len(completion.Choices) == 0 {
		return nil, nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s: model %s at %s answered without any choice", callID, params.Model, baseURL), rollout.ErrModelEmpty, nil)
	}
	var header http.Header
	if resp != nil {
		header = resp.Header
	}
	return completion, header, nil
}

// answerOf turns the model's message into the assistant item to store and
// the calls to run: in tools style the message's tool calls, in gym style its
// text as the action of one step call.
func answerOf(style envs.Style, turn int, content string, toolCalls []transcript.ToolCall, callID string) (transcript.Item, []transcript.ToolCall, error) {
	answer := transcript.Item{Role: "assistant", Content: content}
	var calls []transcript.ToolCall
	switch style {
	case envs.StyleTools:
		for i, tc := range toolCalls {
			if tc.ID == "" {
				// Some OpenAI-compatible servers send no ids; the tool answer
				// must name one, and it must not depend on the run.
				tc.ID = fmt.Sprintf("call_t%d_%d", turn, i)
			}
			calls = append(calls, tc)
		}
		answer.ToolCalls = calls
	case envs.StyleGym:
		// The text is the action. The assistant item keeps only the text: no
		// tools were offered, and the observation comes back as a user message.
		args, err := json.Marshal(struct {
			Action string `json:"action"`
		}{content})
		if err != nil {
			return transcript.Item{}, nil, fmt.Errorf("%s: encode action: %w", callID, err)
		}
		calls = []transcript.ToolCall{{ID: "step-" + strconv.Itoa(turn), Name: envs.StepTool, Arguments: string(args)}}
	}
	return answer, calls, nil
}

// modelClient returns the cached client of endpoint, holding its key. The
// SDK does not retry (Temporal owns retries, so each attempt is visible and
// bounded by the activity's timeouts).
func (a *Activities) modelClient(endpoint destination.Target) *openai.Client {
	cacheKey := endpoint.Name + " " + endpoint.URL
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[cacheKey]; ok {
		return c
	}
	key := endpoint.Secret
	if key == "" {
		key = placeholderAPIKey
	}
	opts := []option.RequestOption{
		option.WithBaseURL(endpoint.URL),
		option.WithAPIKey(key),
		option.WithMaxRetries(0),
		option.WithMiddleware(limitAnswer(a.maxAnswerBytes())),
	}
	if a.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(a.HTTPClient))
	}
	c := openai.NewClient(opts...)
	if a.clients == nil {
		a.clients = map[string]*openai.Client{}
	}
	a.clients[cacheKey] = &c
	return &c
}

// heartbeatWhile heartbeats every HeartbeatEvery until the returned stop is
// called, so a slow model call stays alive and can be cancelled (Temporal
// delivers cancellation to an activity through its heartbeats).
func (a *Activities) heartbeatWhile(ctx context.Context, details ...any) (stop func()) {
	return heartbeat.Every(ctx, a.heartbeatEvery(), details...)
}

// chatMessages maps transcript items to Chat Completions messages.
func chatMessages(items []transcript.Item) ([]openai.ChatCompletionMessageParamUnion, error) {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(items))
	for i, it := range items {
		switch it.Role {
		case "system":
			out = append(out, openai.SystemMessage(it.Content))
		case "user":
			out = append(out, openai.UserMessage(it.Content))
		case "assistant":
			var m openai.ChatCompletionAssistantMessageParam
			if it.Content != "" || len(it.ToolCalls) == 0 {
				m.Content.OfString = openai.String(it.Content)
			}
			for _, tc := range it.ToolCalls {
				m.ToolCalls = append(m.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: tc.Arguments,
						},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &m})
		case "tool":
			if it.ToolCallID == "" {
				return nil, fmt.Errorf("item %d: tool message without tool_call_id", i)
			}
			out = append(out, openai.ToolMessage(it.Content, it.ToolCallID))
		default:
			return nil, fmt.Errorf("item %d: unknown role %q", i, it.Role)
		}
	}
	return out, nil
}

// chatTools maps environment tools to function tools.
func chatTools(tools []envs.Tool) ([]openai.ChatCompletionToolUnionParam, error) {
	out := make([]openai.ChatCompletionToolUnionParam, 0, len(tools))
	for _, t := range tools {
		if t.Name == "" {
			return nil, errors.New("tool without a name")
		}
		fn := openai.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
			dec := json.NewDecoder(bytes.NewReader(p))
			dec.UseNumber() // keep the schema's numbers exactly as written
			var schema map[string]any
			if err := dec.Decode(&schema); err != nil {
				return nil, fmt.Errorf("tool %s: parameters are not a JSON object: %w", t.Name, err)
			}
			fn.Parameters = schema
		}
		out = append(out, openai.ChatCompletionFunctionTool(fn))
	}
	if len(out) == 0 {
		return nil, nil // no tools: omit the field rather than send []
	}
	return out, nil
}

// modelError maps a failed model call: an answer over the size limit is
// not retried (the same request gets the same answer); 429 and 5xx are
// retried by Temporal after the server's Retry-After, at most
// retryLimit; any other 4xx cannot be fixed by retrying; a network
// failure is retried.
func modelError(ctx context.Context, callID, model, baseURL string, err error, retryLimit time.Duration) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: model call cancelled: %w", callID, ctx.Err())
	}
	if tl, ok := asAnswerTooLarge(err); ok {
		return overLimit(callID, model, baseURL, tl.Error())
	}
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		return fmt.Errorf("%s: call model %s at %s: %w", callID, model, baseURL, err)
	}
	status := apiErr.StatusCode
	msg := fmt.Sprintf("%s: model %s at %s answered %d %s: %s",
		callID, model, baseURL, status, http.StatusText(status), apiErrorText(apiErr))
	if status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500 {
		var delay time.Duration
		if apiErr.Response != nil {
			delay = retryAfter(apiErr.Response.Header, time.Now(), retryLimit)
		}
		return temporal.NewApplicationErrorWithOptions(msg, ErrModelUnavailable, temporal.ApplicationErrorOptions{
			NextRetryDelay: delay,
		})
	}
	return temporal.NewNonRetryableApplicationError(msg, rollout.ErrModelRequest, nil)
}

// apiErrorText is what the server said: its error message, or the body.
func apiErrorText(e *openai.Error) string {
	if e.Message != "" {
		return e.Message
	}
	if e.Response != nil && e.Response.Body != nil {
		// The SDK re-fills the body with what it read.
		b, _ := io.ReadAll(io.LimitReader(e.Response.Body, 4096))
		if s := strings.TrimSpace(string(b)); s != "" {
			return rollout.Truncate(s, 500)
		}
	}
	return "(no message)"
}
