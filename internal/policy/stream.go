package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Streaming in vLLM's shapes (vllm/entrypoints/openai/chat_completion/
// protocol.py, ChatCompletionStreamResponse): server-sent events, one
// "data: <chunk>" per generated token, then "data: [DONE]". With
// return_token_ids the first chunk carries prompt_token_ids at the top level
// and every chunk its choice's token_ids; with logprobs each chunk carries
// its tokens' logprobs.content entries.

// chatChunk is one chat.completion.chunk.
type chatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint,omitempty"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *chatUsage    `json:"usage,omitempty"`
	PromptTokenIDs    []int64       `json:"prompt_token_ids,omitempty"`
}

type chunkChoice struct {
	Index        int             `json:"index"`
	Delta        chunkDelta      `json:"delta"`
	Logprobs     *choiceLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	TokenIDs     []int64         `json:"token_ids,omitempty"`
}

type chunkDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []deltaToolCall `json:"tool_calls,omitempty"`
}

// deltaToolCall is vLLM's DeltaToolCall: the index ties fragments of one
// call together; id, type and the name come with its first fragment.
type deltaToolCall struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function deltaFunction `json:"function"`
}

type deltaFunction struct {
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

// streamOptions is the request's stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// sse writes server-sent events.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// send writes one event and flushes it to the client.
func (e *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode chunk: %w", err)
	}
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *sse) done() error {
	if _, err := fmt.Fprint(e.w, "data: [DONE]\n\n"); err != nil {
		return err
	}
	return e.rc.Flush()
}

// streamChat sends the answer a as a chat completion stream, one token per
// chunk at the configured pace, counting what it sends in rec.
func (s *server) streamChat(ctx context.Context, w http.ResponseWriter, req chatRequest, out chatResponse, a scripted, rec *RequestRecord) error {
	deltas, err := a.chatDeltas()
	if err != nil {
		return err
	}
	finish := a.finish
	if m := req.maxTokens(); m >= 0 && m < len(deltas) {
		deltas, finish = deltas[:m], FinishLength
		out.Usage.CompletionTokens = m
		out.Usage.TotalTokens = out.Usage.PromptTokens + m
	}
	wantIDs, wantLogprobs := req.ReturnTokenIDs, req.Logprobs && string(req.TopLogprobs) != "null"
	var lps *choiceLogprobs
	if wantLogprobs {
		lps = logprobsOf(a.output, len(a.prompt), req.ReturnTokensAsTokenIDs)
	}
	chunk := func() chatChunk {
		return chatChunk{ID: out.ID, Object: "chat.completion.chunk", Model: out.Model, SystemFingerprint: systemFingerprint}
	}
	e := newSSE(w)
	first := chunk()
	empty := ""
	first.Choices = []chunkChoice{{Delta: chunkDelta{Role: RoleAssistant, Content: &empty}}}
	if wantIDs {
		first.PromptTokenIDs = a.prompt
	}
	if err := e.send(first); err != nil {
		return err
	}
	p := s.newPacer()
	for i, d := range deltas {
		if err := p.wait(ctx, i); err != nil {
			return err
		}
		c := chunk()
		ch := chunkChoice{Delta: d.chatDelta(a)}
		if wantIDs {
			ch.TokenIDs = a.output[i : i+1]
		}
		if lps != nil {
			ch.Logprobs = &choiceLogprobs{Content: lps.Content[i : i+1]}
		}
		if i == len(deltas)-1 {
			ch.FinishReason = &finish
		}
		c.Choices = []chunkChoice{ch}
		// Counted before it is sent: a client never reads a token the
		// stats do not count yet.
		s.counts.sent(rec, 1)
		if err := e.send(c); err != nil {
			return err
		}
	}
	s.counts.finish(rec)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		c := chunk()
		c.Choices = []chunkChoice{}
		c.Usage = &out.Usage
		if err := e.send(c); err != nil {
			return err
		}
	}
	return e.done()
}

// chatDelta is d as a chunk's delta.
func (d tokenDelta) chatDelta(a scripted) chunkDelta {
	var out chunkDelta
	switch {
	case d.call >= 0:
		tc := a.calls[d.call]
		none := ""
		out.ToolCalls = []deltaToolCall{{Index: d.call, ID: tc.ID, Type: "function", Function: deltaFunction{Name: tc.Name, Arguments: &none}}}
	case d.args != "":
		args := d.args
		out.ToolCalls = []deltaToolCall{{Index: d.argsOf, Function: deltaFunction{Arguments: &args}}}
	case d.content != "":
		content := d.content
		out.Content = &content
	}
	return out
}

// idToken is a token as the legacy completions logprobs spell it: its text,
// or "token_id:N" in id mode.
func idToken(id int64, asIDs bool) string {
	if asIDs {
		return "token_id:" + strconv.FormatInt(id, 10)
	}
	return TokenText(id)
}
