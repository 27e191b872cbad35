package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// samplingFlags are the set's sampling parameters (rollout.Sampling); only
// the flags given reach the request, so the endpoint's defaults stay for
// the rest.
type samplingFlags struct {
	temperature, topP float64
	maxTokens         int64
	stop              []string
	extraBody         string
	captureTokens     bool
}

func (s *samplingFlags) register(f *pflag.FlagSet) {
	f.Float64Var(&s.temperature, "temperature", 0, "sampling temperature of every model call (default: the endpoint's)")
	f.Float64Var(&s.topP, "top-p", 0, "nucleus sampling top_p (default: the endpoint's)")
	f.Int64Var(&s.maxTokens, "max-tokens", 0, "most tokens a model call generates (default: the endpoint's)")
	f.StringSliceVar(&s.stop, "stop", nil, "stop sequences, comma-separated")
	f.StringVar(&s.extraBody, "extra-body", "", `JSON object merged into each request body, e.g. '{"top_k":20}' (vLLM's own fields)`)
	f.BoolVar(&s.captureTokens, "capture-tokens", false, "ask a vLLM-compatible endpoint for token ids and log-probs (kept in the transcript store; see README)")
}

// sampling is the rollout.Sampling the flags given describe, or nil.
func (s *samplingFlags) sampling(cmd *cobra.Command) (*rollout.Sampling, error) {
	f := cmd.Flags()
	out := &rollout.Sampling{Stop: s.stop, CaptureTokens: s.captureTokens}
	if f.Changed("temperature") {
		out.Temperature = &s.temperature
	}
	if f.Changed("top-p") {
		out.TopP = &s.topP
	}
	if f.Changed("max-tokens") {
		out.MaxTokens = &s.maxTokens
	}
	if s.extraBody != "" {
		if err := json.Unmarshal([]byte(s.extraBody), &out.ExtraBody); err != nil {
			return nil, fmt.Errorf("--extra-body: want a JSON object: %w", err)
		}
	}
	if out.Temperature == nil && out.TopP == nil && out.MaxTokens == nil && len(out.Stop) == 0 && out.ExtraBody == nil && !out.CaptureTokens {
		return nil, nil
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("sampling flags: %w", err)
	}
	return out, nil
}
