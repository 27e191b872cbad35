package rollout

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// Bounds of sampling parameters. They are generous (vLLM accepts more than
// the OpenAI API) but keep nonsense and history bloat out: the parameters
// travel in every model call's input.
const (
	MaxTemperature   = 100
	MaxStopSequences = 64
	MaxExtraBodySize = 16 << 10
)

// reservedBodyKeys are request fields turnstile sets itself; an extra_body
// key among them would silently change the conversation, the lineage or the
// number of answers, so it is refused rather than merged.
var reservedBodyKeys = map[string]string{
	"model":            "use policy.model",
	"messages":         "the conversation comes from the transcript",
	"tools":            "tools come from the environment",
	"stream":           "streaming is not supported",
	"stream_options":   "streaming is not supported",
	"n":                "a rollout takes exactly one choice",
	"seed":             "use sampling.seed",
	"temperature":      "use sampling.temperature",
	"top_p":            "use sampling.top_p",
	"max_tokens":       "use sampling.max_tokens",
	"stop":             "use sampling.stop",
	"logprobs":         "use sampling.capture_tokens",
	"top_logprobs":     "use sampling.capture_tokens",
	"return_token_ids": "use sampling.capture_tokens",
}

// Validate reports the first invalid parameter, naming its field. A nil
// Sampling is valid (server defaults).
func (s *Sampling) Validate() error {
	if s == nil {
		return nil
	}
	if t := s.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > MaxTemperature) {
		return fmt.Errorf("sampling.temperature %v is outside 0..%d", *t, MaxTemperature)
	}
	if p := s.TopP; p != nil && (math.IsNaN(*p) || *p <= 0 || *p > 1) {
		return fmt.Errorf("sampling.top_p %v is outside (0, 1]", *p)
	}
	if m := s.MaxTokens; m != nil && *m < 1 {
		return fmt.Errorf("sampling.max_tokens %d is not positive", *m)
	}
	if len(s.Stop) > MaxStopSequences {
		return fmt.Errorf("sampling.stop has %d sequences, more than %d", len(s.Stop), MaxStopSequences)
	}
	for i, st := range s.Stop {
		if st == "" {
			return fmt.Errorf("sampling.stop[%d] is empty", i)
		}
	}
	return s.validateExtraBody()
}

func (s *Sampling) validateExtraBody() error {
	size := 0
	for _, k := range sortedKeys(s.ExtraBody) {
		v := s.ExtraBody[k]
		if why, ok := reservedBodyKeys[k]; ok {
			return fmt.Errorf("sampling.extra_body.%s is set by turnstile: %s", k, why)
		}
		if k == "" {
			return fmt.Errorf("sampling.extra_body has an empty key")
		}
		if !json.Valid(v) {
			return fmt.Errorf("sampling.extra_body.%s is not valid JSON", k)
		}
		size += len(k) + len(v)
	}
	if size > MaxExtraBodySize {
		return fmt.Errorf("sampling.extra_body is %d bytes, more than %d", size, MaxExtraBodySize)
	}
	return nil
}

// sortedKeys returns m's keys in order: the workflow validates extra_body
// with it, so the first error named is the same on every replay.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	//workflowcheck:ignore the order is discarded by the sort below
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
