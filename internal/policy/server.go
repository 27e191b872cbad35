package policy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/sleep"
	"go.uber.org/zap"
)

// Routes of the policy server. Clients use BasePath as the OpenAI base URL.
const (
	BasePath            = "/v1"
	ChatCompletionsPath = BasePath + "/chat/completions"
	ModelsPath          = BasePath + "/models"
	HealthPath          = "/healthz"

	// maxRequestBytes bounds a chat request; a conversation larger than this
	// is a bug upstream, not something to buffer.
	maxRequestBytes = 32 << 20
	// systemFingerprint marks answers as scripted, in the field OpenAI uses
	// for the backend configuration.
	systemFingerprint = "turnstile-scripted"
	// modelOwner is the owned_by of every listed model.
	modelOwner = "turnstile"
)

// Finish reasons of a choice.
const (
	FinishToolCalls = "tool_calls"
	FinishStop      = "stop"
	// FinishLength: the answer was cut at the request's max_tokens.
	FinishLength = "length"
)

// Message roles the server accepts.
const (
	RoleSystem    = "system"
	RoleDeveloper = "developer"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ServerConfig configures the policy server. The answer to a request depends
// only on its model, messages, tools and seed and on Imperfection; latency and
// injected errors are drawn from Rand and vary.
type ServerConfig struct {
	Policies Registry
	// Latency is the mean delay of a chat completion, Jitter the half-width
	// of the uniform spread around it.
	Latency, Jitter time.Duration
	// ErrorRate is the probability of a 503, RateLimitRate that of a 429;
	// both carry Retry-After. Their sum must not exceed 1.
	ErrorRate     float64
	RateLimitRate float64
	RetryAfter    time.Duration
	// Imperfection is passed to every policy (envs.PolicyRequest.Imperfection).
	Imperfection float64
	// Rand drives latency and error injection; nil means a randomly seeded
	// generator. The server serialises its use.
	Rand   *rand.Rand
	Logger *zap.Logger
	// PolicyVersion, when set, is reported on every completion in the
	// PolicyVersionHeader, as a trainer's server reports its weights.
	PolicyVersion string
	// TokensPerSecond paces generation: a streamed answer sends one token
	// every 1/TokensPerSecond, a whole one waits for all of them. Zero
	// sends at once.
	TokensPerSecond float64
	// PadTokens puts that many tokens of deterministic filler (the
	// "thinking" of a long answer) before the content of every answer to
	// a request that offers tools. A gym-style answer (no tools) is its
	// action and is never padded.
	PadTokens int
	// APIKey, when set, is the bearer token every route but HealthPath
	// asks for ("Authorization: Bearer <key>", what OpenAI clients send:
	// a worker's TURNSTILE_MODEL_API_KEY). Empty serves without one.
	APIKey string
}

// Validate reports the first invalid setting.
func (c ServerConfig) Validate() error {
	probability := func(name string, p float64) error {
		if math.IsNaN(p) || p < 0 || p > 1 {
			return fmt.Errorf("%s %v is not a probability in [0, 1]", name, p)
		}
		return nil
	}
	switch {
	case len(c.Policies) == 0:
		return errors.New("no policies registered")
	case c.Latency < 0:
		return fmt.Errorf("latency %v is negative", c.Latency)
	case c.Jitter < 0:
		return fmt.Errorf("jitter %v is negative", c.Jitter)
	case c.RetryAfter < 0:
		return fmt.Errorf("retry-after %v is negative", c.RetryAfter)
	case math.IsNaN(c.TokensPerSecond) || math.IsInf(c.TokensPerSecond, 0) || c.TokensPerSecond < 0:
		return fmt.Errorf("tokens per second %v is not a finite non-negative rate", c.TokensPerSecond)
	case c.PadTokens < 0:
		return fmt.Errorf("pad tokens %d is negative", c.PadTokens)
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"error rate", c.ErrorRate}, {"rate-limit rate", c.RateLimitRate}, {"imperfection", c.Imperfection}} {
		if err := probability(p.name, p.v); err != nil {
			return err
		}
	}
	if c.ErrorRate+c.RateLimitRate > 1 {
		return fmt.Errorf("error rate %v plus rate-limit rate %v exceed 1", c.ErrorRate, c.RateLimitRate)
	}
	return nil
}

// server serves the policies of a ServerConfig.
type server struct {
	cfg ServerConfig
	log *zap.SugaredLogger

	mu  sync.Mutex // guards rng
	rng *rand.Rand

	counts requestStats
}

// NewServer returns the OpenAI-compatible handler of the policies in cfg. An
// invalid cfg yields a handler that answers every request with a 500 naming
// the problem, so a misconfiguration is never served as a working policy.
func NewServer(cfg ServerConfig) http.Handler {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if err := cfg.Validate(); err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusInternalServerError, "server_error", "invalid_configuration", "policy server configuration: "+err.Error())
		})
	}
	s := &server{cfg: cfg, log: log.Sugar(), rng: cfg.Rand}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	mux := http.NewServeMux()
	mux.HandleFunc(ChatCompletionsPath, s.onlyMethod(http.MethodPost, s.chatCompletions))
	mux.HandleFunc(CompletionsPath, s.onlyMethod(http.MethodPost, s.completions))
	mux.HandleFunc(GeneratePath, s.onlyMethod(http.MethodPost, s.generate))
	mux.HandleFunc(StatsPath, s.onlyMethod(http.MethodGet, s.stats))
	mux.HandleFunc(ModelsPath, s.onlyMethod(http.MethodGet, s.listModels))
	mux.HandleFunc(ModelsPath+"/{model}", s.onlyMethod(http.MethodGet, s.getModel))
	mux.HandleFunc(HealthPath, s.onlyMethod(http.MethodGet, health))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	if cfg.APIKey == "" {
		return mux
	}
	return requireKey(cfg.APIKey, mux)
}

// requireKey answers 401 to a request without the bearer token key, on
// every route but the health probe. Only the key's SHA-256 is kept, and
// digests are compared in constant time, so neither the key nor its
// length leaks.
func requireKey(key string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(key))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(tok))
		if r.URL.Path != HealthPath && (!ok || subtle.ConstantTimeCompare(got[:], want[:]) != 1) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="turnstile-policy"`)
			writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "missing or wrong API key (Authorization: Bearer <key>)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) onlyMethod(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, method))
			return
		}
		h(w, r)
	}
}

func health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// modelObject is one entry of GET /v1/models.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

func newModelObject(name string) modelObject {
	return modelObject{ID: name, Object: "model", OwnedBy: modelOwner}
}

func (s *server) listModels(w http.ResponseWriter, _ *http.Request) {
	list := modelList{Object: "list", Data: []modelObject{}}
	for _, name := range s.cfg.Policies.Names() {
		list.Data = append(list.Data, newModelObject(name))
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) getModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	if _, err := s.cfg.Policies.Lookup(name); err != nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, newModelObject(name))
}

// Wire format of the Chat Completions API: only the fields a scripted policy
// reads; everything else in a request is accepted and ignored.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []wireMessage `json:"messages"`
	Tools    []wireTool    `json:"tools"`
	Seed     *int64        `json:"seed"`
	N        *int          `json:"n"`
	Stream   bool          `json:"stream"`
	// StreamOptions.IncludeUsage adds a last chunk with the usage.
	StreamOptions *streamOptions `json:"stream_options"`
	// The vLLM token fields (see tokens.go). TopLogprobs stays raw because
	// vLLM tells an explicit null (no log-probs) from an absent field.
	Logprobs               bool            `json:"logprobs"`
	TopLogprobs            json.RawMessage `json:"top_logprobs"`
	ReturnTokenIDs         bool            `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool            `json:"return_tokens_as_token_ids"`
	// MaxTokens and MaxCompletionTokens (which wins when both are set)
	// cut a streamed answer, finish_reason "length"; a whole answer is
	// never cut.
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
}

// maxTokens is the request's token limit, or -1 for none.
func (r chatRequest) maxTokens() int {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return -1
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// contentPart is one element of an array-valued message content.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	// Description and Parameters are read from offered tools, for the
	// token dialect's template; tool calls never carry them.
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type wireTool struct {
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"` // 0: a timestamp would break determinism
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             chatUsage    `json:"usage"`
	// PromptTokenIDs is vLLM's top-level field (return_token_ids).
	PromptTokenIDs []int64 `json:"prompt_token_ids,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     *choiceLogprobs `json:"logprobs"`
	// TokenIDs is vLLM's per-choice field (return_token_ids).
	TokenIDs []int64 `json:"token_ids,omitempty"`
}

type responseMessage struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	Refusal   *string        `json:"refusal"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// fault is an injected failure.
type fault int

const (
	faultNone fault = iota
	faultRateLimited
	faultUnavailable
)

// draw picks this request's delay and injected fault.
func (s *server) draw() (time.Duration, fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delay := s.cfg.Latency
	if s.cfg.Jitter > 0 {
		delay += time.Duration((s.rng.Float64()*2 - 1) * float64(s.cfg.Jitter))
	}
	delay = max(delay, 0)
	f := faultNone
	if s.cfg.ErrorRate > 0 || s.cfg.RateLimitRate > 0 {
		switch u := s.rng.Float64(); {
		case u < s.cfg.RateLimitRate:
			f = faultRateLimited
		case u < s.cfg.RateLimitRate+s.cfg.ErrorRate:
			f = faultUnavailable
		}
	}
	return delay, f
}

func (s *server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	delay, f := s.draw()
	// A rate limiter refuses before doing any work.
	if f == faultRateLimited {
		s.log.Infow("injected rate limit", "status", http.StatusTooManyRequests)
		s.writeRetryable(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "rate limit reached (injected)")
		return
	}
	req, err := decodeRequest(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", err.Error())
		return
	}
	// Validate before the delay: a real server refuses bad input at once.
	pol, preq, status, code, err := s.prepare(req)
	if err != nil {
		s.fail(w, status, "invalid_request_error", code, err.Error())
		return
	}
	if err := sleep.For(r.Context(), delay); err != nil {
		s.log.Infow("request cancelled during latency", "model", req.Model, "error", err)
		return
	}
	if f == faultUnavailable {
		s.log.Infow("injected outage", "status", http.StatusServiceUnavailable, "model", req.Model)
		s.writeRetryable(w, http.StatusServiceUnavailable, "server_error", "service_unavailable", "policy server overloaded (injected)")
		return
	}
	a, resp, err := s.answerOf(pol, preq, RenderPrompt(templateTools(req.Tools), preq.Messages))
	if err != nil {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", "policy_error", fmt.Sprintf("model %q: %v", req.Model, err))
		return
	}
	out := completion(req.Model, preq, resp)
	addTokens(&out, req, preq)
	if s.cfg.PolicyVersion != "" {
		w.Header().Set(PolicyVersionHeader, s.cfg.PolicyVersion)
	}
	rec := s.counts.begin("chat", req.Model, a.key(), 0)
	s.log.Infow("chat completion", "model", req.Model, "id", out.ID, "finish_reason", out.Choices[0].FinishReason, "messages", len(preq.Messages), "stream", req.Stream, "tokens", len(a.output))
	if req.Stream {
		if err := s.streamChat(r.Context(), w, req, out, a, rec); err != nil {
			s.log.Infow("chat stream ended early", "model", req.Model, "id", out.ID, "sent", rec.Generated, "error", err)
		}
		return
	}
	if err := s.newPacer().waitAll(r.Context(), len(a.output)); err != nil {
		s.log.Infow("request cancelled during generation", "model", req.Model, "error", err)
		return
	}
	s.counts.sent(rec, len(a.output))
	s.counts.finish(rec)
	writeJSON(w, http.StatusOK, out)
}

// decodeRequest reads exactly one JSON object.
func decodeRequest(r io.Reader) (chatRequest, error) {
	var req chatRequest
	if err := decodeJSON(r, &req); err != nil {
		return chatRequest{}, fmt.Errorf("malformed chat completion request: %w", err)
	}
	return req, nil
}

// decodeJSON reads exactly one JSON object into v.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}

// prepare checks a request and turns it into the policy and its request. On
// error it also returns the HTTP status and error code to answer with.
func (s *server) prepare(req chatRequest) (envs.Policy, envs.PolicyRequest, int, string, error) {
	if req.N != nil && *req.N != 1 {
		return nil, envs.PolicyRequest{}, http.StatusBadRequest, "unsupported_value", fmt.Errorf("n=%d is not supported: a scripted policy gives exactly one choice", *req.N)
	}
	if req.Model == "" {
		return nil, envs.PolicyRequest{}, http.StatusBadRequest, "missing_model", errors.New("model is required")
	}
	if m := req.maxTokens(); req.maxTokens() != -1 && m < 1 {
		return nil, envs.PolicyRequest{}, http.StatusBadRequest, "unsupported_value", fmt.Errorf("max_tokens %d: want at least 1", m)
	}
	pol, err := s.cfg.Policies.Lookup(req.Model)
	if err != nil {
		return nil, envs.PolicyRequest{}, http.StatusNotFound, "model_not_found", err
	}
	msgs, err := convertMessages(req.Messages)
	if err != nil {
		return nil, envs.PolicyRequest{}, http.StatusBadRequest, "invalid_messages", err
	}
	tools, err := convertTools(req.Tools)
	if err != nil {
		return nil, envs.PolicyRequest{}, http.StatusBadRequest, "invalid_tools", err
	}
	preq := envs.PolicyRequest{Messages: msgs, Tools: tools, Imperfection: s.cfg.Imperfection}
	if req.Seed != nil {
		preq.Seed = *req.Seed
	}
	return pol, preq, 0, "", nil
}

func convertMessages(in []wireMessage) ([]envs.Message, error) {
	if len(in) == 0 {
		return nil, errors.New("messages must not be empty")
	}
	out := make([]envs.Message, 0, len(in))
	for i, m := range in {
		content, err := messageContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		msg := envs.Message{Role: m.Role, Content: content}
		switch m.Role {
		case RoleSystem, RoleDeveloper, RoleUser:
		case RoleAssistant:
			for j, tc := range m.ToolCalls {
				if tc.Type != "" && tc.Type != "function" {
					return nil, fmt.Errorf("messages[%d].tool_calls[%d]: type %q is not supported (want \"function\")", i, j, tc.Type)
				}
				if tc.ID == "" || tc.Function.Name == "" {
					return nil, fmt.Errorf("messages[%d].tool_calls[%d]: id and function.name are required", i, j)
				}
				msg.ToolCalls = append(msg.ToolCalls, envs.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
		case RoleTool:
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("messages[%d]: a tool message needs tool_call_id", i)
			}
			msg.ToolCallID = m.ToolCallID
		case "":
			return nil, fmt.Errorf("messages[%d]: role is required", i)
		default:
			return nil, fmt.Errorf("messages[%d]: role %q is not supported", i, m.Role)
		}
		out = append(out, msg)
	}
	return out, nil
}

// messageContent flattens a content that is null, a string, or an array of
// text parts.
func messageContent(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content must be a string or an array of text parts: %w", err)
	}
	var text string
	for j, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content[%d]: part type %q is not supported (want \"text\")", j, p.Type)
		}
		text += p.Text
	}
	return text, nil
}

func convertTools(in []wireTool) ([]string, error) {
	var names []string
	for i, t := range in {
		if t.Type != "function" {
			return nil, fmt.Errorf("tools[%d]: type %q is not supported (want \"function\")", i, t.Type)
		}
		if t.Function.Name == "" {
			return nil, fmt.Errorf("tools[%d]: function.name is required", i)
		}
		names = append(names, t.Function.Name)
	}
	return names, nil
}

// completion builds the chat.completion answer. Everything in it, the id
// included, is a function of the request and the policy's response.
func completion(model string, req envs.PolicyRequest, resp envs.PolicyResponse) chatResponse {
	msg := responseMessage{Role: RoleAssistant}
	finish := FinishStop
	completionChars := utf8.RuneCountInString(resp.Content)
	for i, tc := range resp.ToolCalls {
		id := tc.ID
		if id == "" {
			id = envs.CallID(req.Messages, i)
		}
		msg.ToolCalls = append(msg.ToolCalls, wireToolCall{ID: id, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}})
		completionChars += utf8.RuneCountInString(tc.Name) + utf8.RuneCountInString(tc.Arguments)
		finish = FinishToolCalls
	}
	// OpenAI sends content null beside tool calls.
	if resp.Content != "" || len(resp.ToolCalls) == 0 {
		content := resp.Content
		msg.Content = &content
	}
	promptChars := 0
	for _, m := range req.Messages {
		promptChars += utf8.RuneCountInString(m.Content)
		for _, tc := range m.ToolCalls {
			promptChars += utf8.RuneCountInString(tc.Name) + utf8.RuneCountInString(tc.Arguments)
		}
	}
	usage := chatUsage{PromptTokens: tokens(promptChars), CompletionTokens: tokens(completionChars)}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	return chatResponse{
		ID:                completionID(model, req),
		Object:            "chat.completion",
		Model:             model,
		SystemFingerprint: systemFingerprint,
		Choices:           []chatChoice{{Index: 0, Message: msg, FinishReason: finish}},
		Usage:             usage,
	}
}

// tokens estimates a token count as a quarter of the characters, at least 1.
func tokens(chars int) int {
	return max(1, (chars+3)/4)
}

// completionID hashes everything the answer depends on.
func completionID(model string, req envs.PolicyRequest) string {
	b, err := json.Marshal(struct {
		Model        string
		Messages     []envs.Message
		Tools        []string
		Seed         int64
		Imperfection float64
	}{model, req.Messages, req.Tools, req.Seed, req.Imperfection})
	if err != nil {
		// Only strings, ints and a validated float: cannot fail.
		panic(fmt.Sprintf("policy: encode completion id input: %v", err))
	}
	sum := sha256.Sum256(b)
	return "chatcmpl-" + hex.EncodeToString(sum[:12])
}

// errorBody is the OpenAI error envelope.
type errorBody struct {
	Error apiError `json:"error"`
}

type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func (s *server) fail(w http.ResponseWriter, status int, typ, code, msg string) {
	s.log.Infow("chat completion refused", "status", status, "code", code, "error", msg)
	writeError(w, status, typ, code, msg)
}

// writeRetryable answers with an error a client should retry after
// RetryAfter; Retry-After-Ms gives sub-second precision to clients (like
// openai-go) that read it.
func (s *server) writeRetryable(w http.ResponseWriter, status int, typ, code, msg string) {
	secs := int64(math.Ceil(s.cfg.RetryAfter.Seconds()))
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	w.Header().Set("Retry-After-Ms", strconv.FormatInt(s.cfg.RetryAfter.Milliseconds(), 10))
	writeError(w, status, typ, code, msg)
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, errorBody{Error: apiError{Message: msg, Type: typ, Code: code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, fmt.Sprintf("encode response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
