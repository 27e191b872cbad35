package model

import (
	"github.com/openai/openai-go/v3"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// applySampling sets the parameters of s on a chat request. Omitted fields are left
// unset, so the request is exactly today's when s is nil.
func applySampling(s *rollout.Sampling, p *openai.ChatCompletionNewParams) {
	if s == nil {
		return
	}
	if s.Temperature != nil {
		p.Temperature = openai.Float(*s.Temperature)
	}
	if s.TopP != nil {
		p.TopP = openai.Float(*s.TopP)
	}
	if s.MaxTokens != nil {
		p.MaxTokens = openai.Int(*s.MaxTokens)
	}
	if len(s.Stop) > 0 {
		p.Stop.OfStringArray = s.Stop
	}
	if s.Seed != nil {
		p.Seed = openai.Int(*s.Seed)
	}
	extra := map[string]any{}
	for k, v := range s.ExtraBody {
		extra[k] = v
	}
	if s.CaptureTokens {
		// vLLM returns logprobs only when top_logprobs is a number (null
		// means none); return_token_ids adds prompt_token_ids at the top
		// level and token_ids on the choice.
		p.Logprobs = openai.Bool(true)
		p.TopLogprobs = openai.Int(0)
		extra["return_token_ids"] = true
	}
	if len(extra) > 0 {
		p.SetExtraFields(extra)
	}
}
