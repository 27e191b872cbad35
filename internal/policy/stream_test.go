package policy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/policy"
)

// wholeAnswer is a non-streamed chat answer with its token fields.
type wholeAnswer struct {
	PromptTokenIDs []int64 `json:"prompt_token_ids"`
	Choices        []struct {
		TokenIDs []int64 `json:"token_ids"`
		Message  struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
		Logprobs     struct {
			Content []struct {
				Logprob float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

func (a wholeAnswer) logprobs() []float64 {
	var out []float64
	for _, c := range a.Choices[0].Logprobs.Content {
		out = append(out, c.Logprob)
	}
	return out
}

// counterChatBody is a counter request with token capture, as JSON.
func counterChatBody(t *testing.T, stream bool) map[string]any {
	t.Helper()
	b, err := json.Marshal(counterParams(0, 3, 5))
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal(b, &body))
	body["logprobs"], body["top_logprobs"], body["return_token_ids"] = true, 0, true
	if stream {
		body["stream"], body["stream_options"] = true, map[string]any{"include_usage": true}
	}
	return body
}

func postJSON(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	res, err := http.Post(url, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// events reads a server-sent event stream's data lines up to [DONE].
func events(t *testing.T, res *http.Response) []json.RawMessage {
	t.Helper()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	var out []json.RawMessage
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return out
		}
		out = append(out, json.RawMessage(data))
	}
	require.NoError(t, sc.Err())
	require.Fail(t, "the stream ended without [DONE]")
	return nil
}

func whole(t *testing.T, url string, pad int) wholeAnswer {
	t.Helper()
	res := postJSON(t, url+policy.ChatCompletionsPath, counterChatBody(t, false))
	require.Equal(t, http.StatusOK, res.StatusCode)
	var a wholeAnswer
	require.NoError(t, json.NewDecoder(res.Body).Decode(&a))
	require.Len(t, a.Choices, 1)
	require.Greater(t, len(a.Choices[0].TokenIDs), pad, "the answer holds its padding")
	return a
}

// A streamed chat answer, read by the official client's accumulator, is the
// whole answer: the same message, and per chunk vLLM's token_ids and
// logprobs that join to the whole answer's.
func TestServerStreamsChatAsVLLM(t *testing.T) {
	url, client := startPolicyServer(t, policy.ServerConfig{PadTokens: 40, PolicyVersion: "v1"})
	want := whole(t, url, 40)

	params := counterParams(0, 3, 5)
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	got := acc.Choices[0]
	require.Equal(t, want.Choices[0].Message.Content, got.Message.Content)
	require.True(t, strings.HasSuffix(got.Message.Content, "\n"), "padding comes before the (empty) content")
	require.Len(t, got.Message.ToolCalls, 1)
	require.Equal(t, want.Choices[0].Message.ToolCalls[0].ID, got.Message.ToolCalls[0].ID)
	require.Equal(t, want.Choices[0].Message.ToolCalls[0].Function.Arguments, got.Message.ToolCalls[0].Function.Arguments)
	require.Equal(t, policy.FinishToolCalls, got.FinishReason)

	res := postJSON(t, url+policy.ChatCompletionsPath, counterChatBody(t, true))
	require.Equal(t, "v1", res.Header.Get(policy.PolicyVersionHeader))
	var ids []int64
	var lps []float64
	var prompt []int64
	usage := 0
	for i, ev := range events(t, res) {
		var c struct {
			PromptTokenIDs []int64 `json:"prompt_token_ids"`
			Choices        []struct {
				TokenIDs []int64 `json:"token_ids"`
				Logprobs *struct {
					Content []struct {
						Logprob float64 `json:"logprob"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal(ev, &c))
		if i == 0 {
			prompt = c.PromptTokenIDs
		} else {
			require.Nil(t, c.PromptTokenIDs, "prompt_token_ids only in the first chunk")
		}
		if c.Usage != nil {
			usage = c.Usage.CompletionTokens
		}
		for _, ch := range c.Choices {
			ids = append(ids, ch.TokenIDs...)
			if ch.Logprobs != nil {
				for _, l := range ch.Logprobs.Content {
					lps = append(lps, l.Logprob)
				}
			}
		}
	}
	require.Equal(t, want.PromptTokenIDs, prompt)
	require.Equal(t, want.Choices[0].TokenIDs, ids)
	require.Equal(t, want.logprobs(), lps)
	require.Equal(t, len(ids), usage, "the usage chunk counts the generated tokens")
}

// tokenAnswer is what a token-in answer adds up to.
type tokenAnswer struct {
	ids    []int64
	lps    []float64
	text   string
	finish string
}

// readCompletions joins a completions answer, streamed or whole.
func readCompletions(t *testing.T, res *http.Response, stream bool) tokenAnswer {
	t.Helper()
	type choice struct {
		Text     string  `json:"text"`
		TokenIDs []int64 `json:"token_ids"`
		Logprobs *struct {
			TokenLogprobs []float64 `json:"token_logprobs"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	}
	var bodies []json.RawMessage
	if stream {
		bodies = events(t, res)
	} else {
		require.Equal(t, http.StatusOK, res.StatusCode)
		var raw json.RawMessage
		require.NoError(t, json.NewDecoder(res.Body).Decode(&raw))
		bodies = []json.RawMessage{raw}
	}
	var out tokenAnswer
	for _, b := range bodies {
		var c struct {
			Object  string   `json:"object"`
			Choices []choice `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(b, &c))
		require.Equal(t, "text_completion", c.Object)
		for _, ch := range c.Choices {
			out.text += ch.Text
			out.ids = append(out.ids, ch.TokenIDs...)
			if ch.Logprobs != nil {
				out.lps = append(out.lps, ch.Logprobs.TokenLogprobs...)
			}
			if ch.FinishReason != nil {
				out.finish = *ch.FinishReason
			}
		}
	}
	return out
}

// The completions route continues a token prefix exactly as the chat
// answer goes on: the same tokens, the same log-probs (they depend on the
// position in the sequence), the same finish, from any cut.
func TestServerContinuesTokenPrefix(t *testing.T) {
	url, _ := startPolicyServer(t, policy.ServerConfig{PadTokens: 30})
	want := whole(t, url, 30)
	out := want.Choices[0].TokenIDs
	for _, cut := range []int{0, 1, 17, len(out) - 1, len(out)} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("cut %d stream %v", cut, stream), func(t *testing.T) {
				prompt := append(append([]int64{}, want.PromptTokenIDs...), out[:cut]...)
				res := postJSON(t, url+policy.CompletionsPath, map[string]any{
					"model": counterModel, "prompt": prompt, "max_tokens": nil, "seed": 5, "stream": stream,
					"logprobs": 0, "return_token_ids": true, "skip_special_tokens": false,
				})
				got := readCompletions(t, res, stream)
				require.Equal(t, out[cut:], nonNil(got.ids))
				require.Equal(t, want.logprobs()[cut:], nonNilF(got.lps))
				require.Equal(t, policy.Detokenize(out[cut:]), got.text)
				require.Equal(t, want.Choices[0].FinishReason, got.finish)
			})
		}
	}
}

func nonNil(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func nonNilF(s []float64) []float64 {
	if s == nil {
		return []float64{}
	}
	return s
}

// The generate route (tokens in, tokens out) continues the same way.
func TestServerGenerateRoute(t *testing.T) {
	url, _ := startPolicyServer(t, policy.ServerConfig{PadTokens: 10})
	want := whole(t, url, 10)
	out := want.Choices[0].TokenIDs
	prompt := append(append([]int64{}, want.PromptTokenIDs...), out[:5]...)
	res := postJSON(t, url+policy.GeneratePath, map[string]any{
		"model": counterModel, "token_ids": prompt, "stream": true,
		"sampling_params": map[string]any{"seed": 5, "logprobs": 0},
	})
	var ids []int64
	var lps []float64
	for _, ev := range events(t, res) {
		var c struct {
			Choices []struct {
				TokenIDs []int64 `json:"token_ids"`
				Logprobs *struct {
					Content []struct {
						Logprob float64 `json:"logprob"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(ev, &c))
		for _, ch := range c.Choices {
			ids = append(ids, ch.TokenIDs...)
			if ch.Logprobs != nil {
				for _, l := range ch.Logprobs.Content {
					lps = append(lps, l.Logprob)
				}
			}
		}
	}
	require.Equal(t, out[5:], ids)
	require.Equal(t, want.logprobs()[5:], lps)
}

// A token-in request the scripted answer cannot continue is refused with a
// message saying what was wrong.
func TestServerRefusesForeignPrefix(t *testing.T) {
	url, _ := startPolicyServer(t, policy.ServerConfig{})
	want := whole(t, url, 0)
	prompt := append(append([]int64{}, want.PromptTokenIDs...), 'x', 'y')
	for name, tc := range map[string]struct {
		body map[string]any
		want string
	}{
		"foreign prefix": {map[string]any{"model": counterModel, "prompt": prompt, "seed": 5}, "differ at generated token 0"},
		"text prompt":    {map[string]any{"model": counterModel, "prompt": "hello"}, "list of token ids"},
		"no chat":        {map[string]any{"model": counterModel, "prompt": []int64{104, 105}}, "no <|assistant|> marker"},
		"out of vocab":   {map[string]any{"model": counterModel, "prompt": []int64{1 << 20}}, "not a token of this server's vocabulary"},
		"echo":           {map[string]any{"model": counterModel, "prompt": want.PromptTokenIDs, "echo": true}, "echo"},
	} {
		t.Run(name, func(t *testing.T) {
			res := postJSON(t, url+policy.CompletionsPath, tc.body)
			require.Equal(t, http.StatusBadRequest, res.StatusCode)
			var env errorEnvelope
			require.NoError(t, json.NewDecoder(res.Body).Decode(&env))
			require.Contains(t, env.Error.Message, tc.want)
		})
	}
	// vLLM's default max_tokens of a completions request is 16.
	res := postJSON(t, url+policy.CompletionsPath, map[string]any{"model": counterModel, "prompt": want.PromptTokenIDs, "seed": 5, "return_token_ids": true})
	got := readCompletions(t, res, false)
	if n := len(want.Choices[0].TokenIDs); n > 16 {
		require.Len(t, got.ids, 16)
		require.Equal(t, "length", got.finish)
	}
}

// The server counts what each request generated, so a test can tell how
// much a crash made it generate twice: a stream the client walks away from
// is counted up to where it stopped, and not finished.
func TestServerCountsGeneratedTokens(t *testing.T) {
	url, _ := startPolicyServer(t, policy.ServerConfig{PadTokens: 200, TokensPerSecond: 400})
	want := whole(t, url, 200)
	n := len(want.Choices[0].TokenIDs)

	ctx, cancel := context.WithCancel(context.Background())
	b, err := json.Marshal(counterChatBody(t, true))
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+policy.ChatCompletionsPath, bytes.NewReader(b))
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	sc := bufio.NewScanner(res.Body)
	for read := 0; read < 10 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			read++
		}
	}
	cancel()
	res.Body.Close()

	var st policy.Stats
	require.Eventually(t, func() bool {
		r, err := http.Get(url + policy.StatsPath)
		if err != nil {
			return false
		}
		defer r.Body.Close()
		st = policy.Stats{}
		return json.NewDecoder(r.Body).Decode(&st) == nil && len(st.Requests) == 2 && st.Requests[1].Generated < n &&
			st.GeneratedTokens == int64(n+st.Requests[1].Generated)
	}, 10*time.Second, 10*time.Millisecond, "stats %+v", &st)
	first, cut := st.Requests[0], st.Requests[1]
	require.Equal(t, n, first.Generated)
	require.True(t, first.Finished)
	require.False(t, cut.Finished, "the stream the client left is not finished")
	require.GreaterOrEqual(t, cut.Generated, 9, "the tokens the client read were generated")
	require.Equal(t, first.Key, cut.Key, "both requests generate the same answer")
	require.Equal(t, "chat", cut.Route)
}

// A streamed chat answer stops at the request's max_tokens with finish
// reason "length": the first tokens of the whole answer, their log-probs,
// and a usage that counts them. A limit at or above the answer's length
// leaves it whole; a limit below 1 is refused.
func TestServerStreamedChatHonoursMaxTokens(t *testing.T) {
	url, _ := startPolicyServer(t, policy.ServerConfig{PadTokens: 40})
	want := whole(t, url, 40)
	all := want.Choices[0].TokenIDs
	read := func(limit any) ([]int64, []float64, string, int) {
		body := counterChatBody(t, true)
		body["max_tokens"] = limit
		var ids []int64
		var lps []float64
		finish, usage := "", 0
		for _, ev := range events(t, postJSON(t, url+policy.ChatCompletionsPath, body)) {
			var c struct {
				Choices []struct {
					TokenIDs []int64 `json:"token_ids"`
					Logprobs *struct {
						Content []struct {
							Logprob float64 `json:"logprob"`
						} `json:"content"`
					} `json:"logprobs"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage *struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			require.NoError(t, json.Unmarshal(ev, &c))
			if c.Usage != nil {
				usage = c.Usage.CompletionTokens
			}
			for _, ch := range c.Choices {
				ids = append(ids, ch.TokenIDs...)
				if ch.Logprobs != nil {
					for _, l := range ch.Logprobs.Content {
						lps = append(lps, l.Logprob)
					}
				}
				if ch.FinishReason != nil {
					finish = *ch.FinishReason
				}
			}
		}
		return ids, lps, finish, usage
	}
	ids, lps, finish, usage := read(10)
	require.Equal(t, all[:10], ids)
	require.Equal(t, want.logprobs()[:10], lps)
	require.Equal(t, policy.FinishLength, finish)
	require.Equal(t, 10, usage)

	ids, _, finish, _ = read(len(all))
	require.Equal(t, all, ids, "a limit of exactly the answer's length")
	require.Equal(t, want.Choices[0].FinishReason, finish, "the answer ended on its own")

	body := counterChatBody(t, true)
	body["max_tokens"] = 0
	res := postJSON(t, url+policy.ChatCompletionsPath, body)
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&e))
	require.Contains(t, e.Error.Message, "max_tokens 0")
}
