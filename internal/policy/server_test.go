package policy_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
)

// echoPolicy is a second policy, so listings hold more than one model.
type echoPolicy struct{}

func (echoPolicy) Respond(req envs.PolicyRequest) (envs.PolicyResponse, error) {
	return envs.PolicyResponse{Content: req.Messages[len(req.Messages)-1].Content}, nil
}

// counterModel is the counter's scripted model as users name it; spelled
// out, not derived, so a change of the naming convention fails here.
const (
	counterModel = "scripted-counter"
	echoModel    = "scripted-echo"
)

func serverTestRegistry() policy.Registry {
	return policy.Registry{counterModel: counter.Policy{}, echoModel: echoPolicy{}}
}

// startServer serves cfg (with the test registry when cfg has none) and
// returns its URL and an official client for it.
func startPolicyServer(t *testing.T, cfg policy.ServerConfig) (string, openai.Client) {
	t.Helper()
	if cfg.Policies == nil {
		cfg.Policies = serverTestRegistry()
	}
	srv := httptest.NewServer(policy.NewServer(cfg))
	t.Cleanup(srv.Close)
	client := openai.NewClient(
		option.WithBaseURL(srv.URL+"/v1/"),
		option.WithAPIKey("test"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(srv.Client()),
	)
	return srv.URL, client
}

func incrementTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name:        counter.ToolIncrement,
		Description: openai.String("Add amount to the counter."),
		Parameters: openai.FunctionParameters{
			"type":       "object",
			"properties": map[string]any{"amount": map[string]any{"type": "integer"}},
			"required":   []string{"amount"},
		},
	})
}

func counterParams(start, target int, seed int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model: counterModel,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You operate a counter."),
			openai.UserMessage(envtest.CounterTask(start, target)),
		},
		Tools: []openai.ChatCompletionToolUnionParam{incrementTool()},
		Seed:  openai.Int(seed),
	}
}

// serverCounterEpisode drives a counter episode by hand through the server and returns
// the final counter value and the number of model calls.
func serverCounterEpisode(t *testing.T, client openai.Client, start, target int, seed int64) (int, int) {
	t.Helper()
	ctx := context.Background()
	params := counterParams(start, target, seed)
	value := start
	for calls := 1; calls <= 100; calls++ {
		resp, err := client.Chat.Completions.New(ctx, params)
		require.NoError(t, err, "seed %d call %d", seed, calls)
		choice := resp.Choices[0]
		if len(choice.Message.ToolCalls) == 0 {
			require.Equal(t, policy.FinishStop, choice.FinishReason, "seed %d: final answer %q (finish %q), want %q (stop)", seed, choice.Message.Content, choice.FinishReason, counter.Done)
			require.Equal(t, counter.Done, choice.Message.Content, "seed %d: final answer %q (finish %q), want %q (stop)", seed, choice.Message.Content, choice.FinishReason, counter.Done)
			return value, calls
		}
		value++
		params.Messages = append(params.Messages,
			choice.Message.ToParam(),
			openai.ToolMessage(fmt.Sprintf("counter=%d", value), choice.Message.ToolCalls[0].ID))
	}
	require.Failf(t, "no end", "seed %d: episode did not end in 100 calls", seed)
	return 0, 0
}

// TestServerCounterEpisode drives a full episode by hand and checks every
// answer against the policy applied to the conversation as the client sent
// it, so tools, tool calls and tool messages must round-trip exactly.
func TestServerCounterEpisode(t *testing.T) {
	_, client := startPolicyServer(t, policy.ServerConfig{})
	ctx := context.Background()
	params := counterParams(0, 3, 11)
	mirror := envtest.CounterConversation(envtest.CounterTask(0, 3)) // what the policy should see
	observations := []string{"counter=1", "error: environment parked, retry", "counter=2", "counter=3"}
	for turn := 0; ; turn++ {
		resp, err := client.Chat.Completions.New(ctx, params)
		require.NoError(t, err, "turn %d", turn)
		require.True(t, strings.HasPrefix(resp.ID, "chatcmpl-"), "turn %d: id %q object %q model %q", turn, resp.ID, resp.Object, resp.Model)
		require.EqualValues(t, "chat.completion", resp.Object, "turn %d: id %q model %q", turn, resp.ID, resp.Model)
		require.Equal(t, counterModel, resp.Model, "turn %d: id %q object %q model %q", turn, resp.ID, resp.Object, resp.Model)
		require.GreaterOrEqual(t, resp.Usage.PromptTokens, int64(1), "turn %d: usage %+v", turn, resp.Usage)
		require.GreaterOrEqual(t, resp.Usage.CompletionTokens, int64(1), "turn %d: usage %+v", turn, resp.Usage)
		require.Equal(t, resp.Usage.PromptTokens+resp.Usage.CompletionTokens, resp.Usage.TotalTokens, "turn %d: usage %+v", turn, resp.Usage)
		require.Len(t, resp.Choices, 1, "turn %d: %d choices, want 1", turn, len(resp.Choices))
		msg := resp.Choices[0].Message
		if turn == len(observations) {
			require.Equal(t, policy.FinishStop, resp.Choices[0].FinishReason, "last turn: %+v, want content %q and no tool calls", resp.Choices[0], counter.Done)
			require.Equal(t, counter.Done, msg.Content, "last turn: %+v, want content %q and no tool calls", resp.Choices[0], counter.Done)
			require.Empty(t, msg.ToolCalls, "last turn: %+v, want content %q and no tool calls", resp.Choices[0], counter.Done)
			return
		}
		require.Equal(t, policy.FinishToolCalls, resp.Choices[0].FinishReason, "turn %d: finish %q with %d tool calls, want one increment", turn, resp.Choices[0].FinishReason, len(msg.ToolCalls))
		require.Len(t, msg.ToolCalls, 1, "turn %d: finish %q with %d tool calls, want one increment", turn, resp.Choices[0].FinishReason, len(msg.ToolCalls))
		call := msg.ToolCalls[0]
		require.Equal(t, "function", call.Type, "turn %d: tool call %+v", turn, call)
		require.Equal(t, counter.ToolIncrement, call.Function.Name, "turn %d: tool call %+v", turn, call)
		require.Equal(t, `{"amount":1}`, call.Function.Arguments, "turn %d: tool call %+v", turn, call)
		want := envs.CallID(mirror, 0)
		require.Equal(t, want, call.ID, "turn %d: call id %q, want %q: the server saw a different conversation", turn, call.ID, want)
		params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage(observations[turn], call.ID))
		mirror = append(mirror,
			envs.Message{Role: "assistant", ToolCalls: []envs.ToolCall{{ID: call.ID, Name: counter.ToolIncrement, Arguments: `{"amount":1}`}}},
			envs.Message{Role: "tool", ToolCallID: call.ID, Content: observations[turn]})
	}
}

func TestServerDeterminism(t *testing.T) {
	_, plain := startPolicyServer(t, policy.ServerConfig{})
	_, jittery := startPolicyServer(t, policy.ServerConfig{Latency: time.Millisecond, Jitter: time.Millisecond, Rand: rand.New(rand.NewPCG(1, 2))})
	ctx := context.Background()
	params := counterParams(2, 5, 42)
	params.Messages = append(params.Messages,
		openai.AssistantMessage(""), // an empty assistant turn must not break anything
		openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart("go on")}))

	first, err := plain.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	for name, c := range map[string]openai.Client{"same server": plain, "other server with latency": jittery} {
		again, err := c.Chat.Completions.New(ctx, params)
		require.NoError(t, err, "%s", name)
		require.Equal(t, first.RawJSON(), again.RawJSON(), "%s: answer differs:\n%s\n%s", name, again.RawJSON(), first.RawJSON())
	}
	params.Seed = openai.Int(43)
	other, err := plain.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	require.NotEqual(t, first.ID, other.ID, "seeds 42 and 43 share the completion id %q", first.ID)
}

func TestServerImperfection(t *testing.T) {
	_, client := startPolicyServer(t, policy.ServerConfig{Imperfection: 0.3})
	hits, misses := 0, 0
	for seed := int64(0); seed < 200; seed++ {
		switch value, _ := serverCounterEpisode(t, client, 1, 3, seed); value {
		case 3:
			hits++
		case 2:
			misses++
		default:
			require.Failf(t, "counter out of range", "seed %d: counter ended at %d, want 3 or 2", seed, value)
		}
	}
	require.NotEqual(t, 0, hits, "hits=%d misses=%d over 200 seeds with imperfection 0.3, want both", hits, misses)
	require.NotEqual(t, 0, misses, "hits=%d misses=%d over 200 seeds with imperfection 0.3, want both", hits, misses)
}

func TestServerPerfectEpisode(t *testing.T) {
	_, client := startPolicyServer(t, policy.ServerConfig{})
	value, calls := serverCounterEpisode(t, client, 0, 4, 5)
	require.Equal(t, 4, value, "episode ended at %d after %d calls, want 4 after 5", value, calls)
	require.Equal(t, 5, calls, "episode ended at %d after %d calls, want 4 after 5", value, calls)
}

// errorEnvelope is the OpenAI error body.
type errorEnvelope struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func TestServerRejects(t *testing.T) {
	url, _ := startPolicyServer(t, policy.ServerConfig{})
	task, _ := json.Marshal(envtest.CounterTask(0, 2))
	user := `{"role":"user","content":` + string(task) + `}`
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantCode   string
		wantMsg    string
	}{
		{name: "malformed JSON", body: `{"model":`, wantStatus: 400, wantCode: "invalid_json", wantMsg: "malformed"},
		{name: "trailing data", body: `{"model":"scripted-counter","messages":[` + user + `]} {}`, wantStatus: 400, wantCode: "invalid_json", wantMsg: "after the JSON object"},
		{name: "unknown model", body: `{"model":"gpt-9","messages":[` + user + `]}`, wantStatus: 404, wantCode: "model_not_found", wantMsg: `unknown model "gpt-9"`},
		{name: "missing model", body: `{"messages":[` + user + `]}`, wantStatus: 400, wantCode: "missing_model", wantMsg: "model is required"},
		{name: "stream of an unknown model", body: `{"model":"gpt-9","stream":true,"messages":[` + user + `]}`, wantStatus: 404, wantCode: "model_not_found", wantMsg: `unknown model "gpt-9"`},
		{name: "n=2", body: `{"model":"scripted-counter","n":2,"messages":[` + user + `]}`, wantStatus: 400, wantCode: "unsupported_value", wantMsg: "n=2"},
		{name: "no messages", body: `{"model":"scripted-counter","messages":[]}`, wantStatus: 400, wantCode: "invalid_messages", wantMsg: "must not be empty"},
		{name: "tool message without id", body: `{"model":"scripted-counter","messages":[` + user + `,{"role":"tool","content":"counter=1"}]}`, wantStatus: 400, wantCode: "invalid_messages", wantMsg: "tool_call_id"},
		{name: "unknown role", body: `{"model":"scripted-counter","messages":[{"role":"wizard","content":"x"}]}`, wantStatus: 400, wantCode: "invalid_messages", wantMsg: `role "wizard"`},
		{name: "image content", body: `{"model":"scripted-counter","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, wantStatus: 400, wantCode: "invalid_messages", wantMsg: `"image_url"`},
		{name: "non-function tool", body: `{"model":"scripted-counter","tools":[{"type":"custom"}],"messages":[` + user + `]}`, wantStatus: 400, wantCode: "invalid_tools", wantMsg: `"custom"`},
		{name: "policy error", body: `{"model":"scripted-counter","messages":[{"role":"user","content":"count!"}]}`, wantStatus: 400, wantCode: "policy_error", wantMsg: "no TASK line"},
		{name: "tool not offered", body: `{"model":"scripted-counter","tools":[{"type":"function","function":{"name":"reset"}}],"messages":[` + user + `]}`, wantStatus: 400, wantCode: "policy_error", wantMsg: `"increment" is not among`},
		{name: "GET completions", method: http.MethodGet, wantStatus: 405, wantCode: "method_not_allowed"},
		{name: "unknown path", method: http.MethodGet, path: "/v1/embeddings", wantStatus: 404, wantCode: "not_found"},
		{name: "unknown model object", method: http.MethodGet, path: "/v1/models/gpt-9", wantStatus: 404, wantCode: "model_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path := cmp.Or(tt.method, http.MethodPost), cmp.Or(tt.path, policy.ChatCompletionsPath)
			req, err := http.NewRequest(method, url+path, strings.NewReader(tt.body))
			require.NoError(t, err)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			var env errorEnvelope
			require.NoError(t, json.NewDecoder(res.Body).Decode(&env), "status %d, body is not an error envelope", res.StatusCode)
			require.Equal(t, tt.wantStatus, res.StatusCode, "got %d %+v, want %d code %q message containing %q", res.StatusCode, env.Error, tt.wantStatus, tt.wantCode, tt.wantMsg)
			require.Equal(t, tt.wantCode, env.Error.Code, "got %d %+v, want %d code %q message containing %q", res.StatusCode, env.Error, tt.wantStatus, tt.wantCode, tt.wantMsg)
			require.Contains(t, env.Error.Message, tt.wantMsg, "got %d %+v, want %d code %q message containing %q", res.StatusCode, env.Error, tt.wantStatus, tt.wantCode, tt.wantMsg)
			require.NotEqual(t, "", env.Error.Type, "got %d %+v, want %d code %q message containing %q", res.StatusCode, env.Error, tt.wantStatus, tt.wantCode, tt.wantMsg)
			require.Equal(t, "application/json", res.Header.Get("Content-Type"), "Content-Type")
		})
	}
}

// TestServerClientErrors checks the official client sees our errors as API errors.
func TestServerClientErrors(t *testing.T) {
	_, client := startPolicyServer(t, policy.ServerConfig{})
	ctx := context.Background()

	params := counterParams(0, 1, 1)
	params.Model = "gpt-9"
	_, err := client.Chat.Completions.New(ctx, params)
	assertAPIError(t, err, http.StatusNotFound, "model_not_found")

	params = counterParams(0, 1, 1)
	params.Model = "gpt-9"
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	require.False(t, stream.Next(), "streaming request produced a chunk")
	assertAPIError(t, stream.Err(), http.StatusNotFound, "model_not_found")

	params = counterParams(0, 1, 1)
	params.N = openai.Int(2)
	_, err = client.Chat.Completions.New(ctx, params)
	assertAPIError(t, err, http.StatusBadRequest, "unsupported_value")
}

func assertAPIError(t *testing.T, err error, status int, code string) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr, "error %v is not an API error", err)
	require.Equal(t, status, apiErr.StatusCode, "API error %d code %q type %q message %q, want %d code %q", apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message, status, code)
	require.Equal(t, code, apiErr.Code, "API error %d code %q type %q message %q, want %d code %q", apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message, status, code)
	require.NotEqual(t, "", apiErr.Message, "API error %d code %q type %q message %q, want %d code %q", apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message, status, code)
	require.NotEqual(t, "", apiErr.Type, "API error %d code %q type %q message %q, want %d code %q", apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message, status, code)
	return apiErr
}

func TestServerInjectedErrors(t *testing.T) {
	tests := []struct {
		name       string
		cfg        policy.ServerConfig
		wantStatus int
		wantCode   string
	}{
		{name: "outage", cfg: policy.ServerConfig{ErrorRate: 1, RetryAfter: 2 * time.Second}, wantStatus: 503, wantCode: "service_unavailable"},
		{name: "rate limit", cfg: policy.ServerConfig{RateLimitRate: 1, RetryAfter: 2 * time.Second}, wantStatus: 429, wantCode: "rate_limit_exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, client := startPolicyServer(t, tt.cfg)
			_, err := client.Chat.Completions.New(context.Background(), counterParams(0, 1, 1))
			apiErr := assertAPIError(t, err, tt.wantStatus, tt.wantCode)
			require.Equal(t, "2", apiErr.Response.Header.Get("Retry-After"), "Retry-After")
			got := apiErr.Response.Header.Get("Retry-After-Ms")
			require.Equal(t, "2000", got, "Retry-After-Ms %q, want 2000", got)
			// Health and listings are never failed on purpose.
			res, err := http.Get(url + policy.HealthPath)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode, "healthz %d during injected errors", res.StatusCode)
		})
	}
}

// TestServerFaultsDoNotChangeAnswers retries through injected faults and
// gets exactly the answer of a server without faults.
func TestServerFaultsDoNotChangeAnswers(t *testing.T) {
	_, clean := startPolicyServer(t, policy.ServerConfig{})
	_, faulty := startPolicyServer(t, policy.ServerConfig{ErrorRate: 0.4, RateLimitRate: 0.3, Rand: rand.New(rand.NewPCG(3, 4))})
	ctx := context.Background()
	params := counterParams(0, 2, 9)
	want, err := clean.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	seen := map[int]int{}
	for attempt := 0; attempt < 200; attempt++ {
		got, err := faulty.Chat.Completions.New(ctx, params)
		if err != nil {
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr, "attempt %d: %v", attempt, err)
			seen[apiErr.StatusCode]++
			continue
		}
		seen[http.StatusOK]++
		require.Equal(t, want.RawJSON(), got.RawJSON(), "answer after faults differs:\n%s\n%s", got.RawJSON(), want.RawJSON())
	}
	for _, status := range []int{http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		require.NotEqual(t, 0, seen[status], "statuses %v over 200 attempts, want some %d", seen, status)
	}
}

func TestServerModels(t *testing.T) {
	url, client := startPolicyServer(t, policy.ServerConfig{})
	ctx := context.Background()
	page, err := client.Models.List(ctx)
	require.NoError(t, err)
	var got []string
	for _, m := range page.Data {
		require.EqualValues(t, "model", m.Object, "model %+v", m)
		require.NotEqual(t, "", m.OwnedBy, "model %+v", m)
		got = append(got, m.ID)
	}
	want := serverTestRegistry().Names()
	require.Equal(t, fmt.Sprint(want), fmt.Sprint(got), "models %v, want %v", got, want)
	m, err := client.Models.Get(ctx, counterModel)
	require.NoError(t, err, "Get(%q) = %+v, %v", counterModel, m, err)
	require.Equal(t, counterModel, m.ID, "Get(%q) = %+v, %v", counterModel, m, err)
	res, err := http.Get(url + policy.HealthPath)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "healthz status")
}

// syncBuffer is a log sink safe for concurrent handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestServerLatencyHonoursCancellation: a request abandoned by its client
// must not keep a handler asleep. httptest's Close waits for every handler,
// so a handler sleeping out its hour would hang this test.
func TestServerLatencyHonoursCancellation(t *testing.T) {
	var logs syncBuffer
	srv := httptest.NewServer(policy.NewServer(policy.ServerConfig{
		Policies: serverTestRegistry(),
		Latency:  time.Hour,
		Logger:   zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(&logs), zap.DebugLevel)),
	}))
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := client.Chat.Completions.New(ctx, counterParams(0, 1, 1))
	require.ErrorIs(t, err, context.DeadlineExceeded, "error %v, want the client's deadline", err)
	srv.Close()
	require.Contains(t, logs.String(), "request cancelled during latency", "handler did not report the cancellation; logs:\n%s", logs.String())
}

func TestServerConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     policy.ServerConfig
		wantErr string
	}{
		{name: "valid", cfg: policy.ServerConfig{Policies: serverTestRegistry(), Latency: time.Second, Jitter: time.Second, ErrorRate: 0.5, RateLimitRate: 0.5, Imperfection: 1}},
		{name: "no policies", cfg: policy.ServerConfig{}, wantErr: "no policies"},
		{name: "negative latency", cfg: policy.ServerConfig{Policies: serverTestRegistry(), Latency: -1}, wantErr: "latency"},
		{name: "negative jitter", cfg: policy.ServerConfig{Policies: serverTestRegistry(), Jitter: -1}, wantErr: "jitter"},
		{name: "negative retry-after", cfg: policy.ServerConfig{Policies: serverTestRegistry(), RetryAfter: -1}, wantErr: "retry-after"},
		{name: "error rate above 1", cfg: policy.ServerConfig{Policies: serverTestRegistry(), ErrorRate: 1.5}, wantErr: "error rate"},
		{name: "rates sum above 1", cfg: policy.ServerConfig{Policies: serverTestRegistry(), ErrorRate: 0.6, RateLimitRate: 0.6}, wantErr: "exceed 1"},
		{name: "negative imperfection", cfg: policy.ServerConfig{Policies: serverTestRegistry(), Imperfection: -0.1}, wantErr: "imperfection"},
		{name: "negative rate", cfg: policy.ServerConfig{Policies: serverTestRegistry(), TokensPerSecond: -1}, wantErr: "tokens per second"},
		{name: "negative padding", cfg: policy.ServerConfig{Policies: serverTestRegistry(), PadTokens: -1}, wantErr: "pad tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err, "Validate")
				return
			}
			require.ErrorContains(t, err, tt.wantErr, "Validate = %v, want an error containing %q", err, tt.wantErr)
			// A server built from it refuses everything, naming the problem.
			srv := httptest.NewServer(policy.NewServer(tt.cfg))
			defer srv.Close()
			res, err := http.Get(srv.URL + policy.HealthPath)
			require.NoError(t, err)
			defer res.Body.Close()
			var env errorEnvelope
			err = json.NewDecoder(res.Body).Decode(&env)
			require.NoError(t, err, "status %d envelope %+v (%v), want 500 naming %q", res.StatusCode, env.Error, err, tt.wantErr)
			require.Equal(t, 500, res.StatusCode, "status %d envelope %+v (%v), want 500 naming %q", res.StatusCode, env.Error, err, tt.wantErr)
			require.Contains(t, env.Error.Message, tt.wantErr, "status %d envelope %+v (%v), want 500 naming %q", res.StatusCode, env.Error, err, tt.wantErr)
		})
	}
}
