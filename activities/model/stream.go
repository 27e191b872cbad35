package model

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// Reading a streamed generation in vLLM's shapes. Chat completions
// (vllm/entrypoints/openai/chat_completion/protocol.py,
// ChatCompletionStreamResponse): with return_token_ids the first chunk
// carries prompt_token_ids at the top level and every chunk its choice's
// token_ids delta; with logprobs each chunk carries its tokens'
// logprobs.content entries (token, logprob, bytes). Completions
// (completion/protocol.py, CompletionStreamResponse): prompt_token_ids and
// token_ids sit on the choice, log-probs are the legacy parallel arrays
// (tokens, token_logprobs). An endpoint that answers a stream request with
// one JSON body (it does not stream) is read as one chunk.

// maxEventBytes bounds one server-sent event line.
const maxEventBytes = 16 << 20

// streamEvents calls fn with each event's data of resp's body, until
// [DONE] or the end; a JSON body (not a stream) is one event.
func streamEvents(resp *http.Response, fn func(data []byte) error) error {
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct != "text/event-stream" {
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxEventBytes))
		if err != nil {
			return fmt.Errorf("read answer: %w", err)
		}
		return fn(body)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue // comments, event names, blank separators
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			return nil
		}
		if err := fn(data); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stream: %w", err)
	}
	return errStreamCut
}

// errStreamCut: the stream ended without [DONE] and without a finish reason.
var errStreamCut = errors.New("the stream ended before the answer did")

// errorEvent is an error event inside a stream (vLLM sends
// {"error": {...}} when generation fails after the stream began).
type errorEvent struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// chatChunkWire is a chat.completion.chunk, or a whole chat.completion (a
// non-streaming answer: message instead of delta).
type chatChunkWire struct {
	Model          string      `json:"model"`
	PolicyVersion  string      `json:"policy_version"`
	PromptTokenIDs []int64     `json:"prompt_token_ids"`
	Error          *errorEvent `json:"error"`
	Choices        []struct {
		Delta          *messageWire  `json:"delta"`
		Message        *messageWire  `json:"message"`
		Logprobs       *chatLogprobs `json:"logprobs"`
		FinishReason   *string       `json:"finish_reason"`
		TokenIDs       []int64       `json:"token_ids"`
		PromptTokenIDs []int64       `json:"prompt_token_ids"` // SGLang's place
	} `json:"choices"`
	Usage *usageWire `json:"usage"`
}

type messageWire struct {
	Content          *string `json:"content"`
	Reasoning        *string `json:"reasoning"`
	ReasoningContent *string `json:"reasoning_content"`
	ToolCalls        []struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type chatLogprobs struct {
	Content []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"content"`
}

type usageWire struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// completionChunkWire is a text_completion chunk or answer.
type completionChunkWire struct {
	Model         string      `json:"model"`
	PolicyVersion string      `json:"policy_version"`
	Error         *errorEvent `json:"error"`
	Choices       []struct {
		Text     string `json:"text"`
		Logprobs *struct {
			Tokens        []string   `json:"tokens"`
			TokenLogprobs []*float64 `json:"token_logprobs"`
		} `json:"logprobs"`
		FinishReason   *string `json:"finish_reason"`
		TokenIDs       []int64 `json:"token_ids"`
		PromptTokenIDs []int64 `json:"prompt_token_ids"`
	} `json:"choices"`
	Usage *usageWire `json:"usage"`
}

// tokenPiece is what one chunk adds to a generation: its tokens, their
// log-probs (nil when the endpoint sent none) and their raw text.
type tokenPiece struct {
	ids  []int64
	lps  []float64
	text string
	// textKnown: the raw text is the tokens' own (from log-prob bytes or
	// token strings), not a parsed view of them.
	textKnown bool
}

// chatPiece is the token piece of a chat choice: ids from token_ids (else
// from "token_id:N" log-prob tokens), log-probs and raw text from
// logprobs.content (each token's bytes, else its token string).
func chatPiece(ids []int64, lp *chatLogprobs) tokenPiece {
	p := tokenPiece{ids: ids}
	if lp == nil {
		return p
	}
	var idsFromTokens []int64
	var text strings.Builder
	p.textKnown = true
	for _, c := range lp.Content {
		p.lps = append(p.lps, c.Logprob)
		if id, ok := strings.CutPrefix(c.Token, tokenIDPrefix); ok {
			if n, err := strconv.ParseInt(id, 10, 64); err == nil {
				idsFromTokens = append(idsFromTokens, n)
			}
			if len(c.Bytes) == 0 {
				p.textKnown = false
			}
		}
		if len(c.Bytes) > 0 {
			b := make([]byte, len(c.Bytes))
			for i, v := range c.Bytes {
				b[i] = byte(v)
			}
			text.Write(b)
		} else {
			text.WriteString(c.Token)
		}
	}
	p.text = text.String()
	if p.ids == nil && len(idsFromTokens) == len(lp.Content) {
		p.ids = idsFromTokens
	}
	if len(p.lps) != len(p.ids) {
		p.lps, p.textKnown = nil, false // misaligned: dropped, never shifted
	}
	return p
}

// decodeEvent decodes one event into v, turning an error event into an
// error.
func decodeEvent(data []byte, v any, errOf func() *errorEvent) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("malformed chunk %q: %w", truncate(string(data), 200), err)
	}
	if e := errOf(); e != nil {
		return fmt.Errorf("the endpoint reported an error mid-stream: %s (%s)", e.Message, e.Type)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
