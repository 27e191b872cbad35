package workers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A finished model call's tokens are counted by how they were got: a
// continued call's prefix as recovered, a thrown-away prefix as
// regenerated, and a call that started over once more.
func TestModelTokenCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, nil, nil)
	m.modelTokens(&rollout.GenerationRef{GenerationTokens: 100})
	m.modelTokens(&rollout.GenerationRef{GenerationTokens: 200, GenerationRecovery: rollout.GenerationRecovery{ResumedAt: []int{64, 128}, TokensRecovered: 128}})
	m.modelTokens(&rollout.GenerationRef{GenerationTokens: 50, GenerationRecovery: rollout.GenerationRecovery{Regenerated: true, TokensRegenerated: 32}})
	m.modelTokens(nil) // no token capture
	require.Equal(t, map[string]float64{
		"turnstile_model_tokens_total kind=generated":   100 + 72 + 50,
		"turnstile_model_tokens_total kind=recovered":   128,
		"turnstile_model_tokens_total kind=regenerated": 32,
		"turnstile_model_calls_regenerated_total":       1,
	}, counters(t, reg))
	var none *Metrics
	none.modelTokens(&rollout.GenerationRef{GenerationTokens: 1}) // records nothing, no panic
}

// counters are the counter values reg gathers, by name and label.
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetCounter() == nil {
				continue
			}
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += " " + l.GetName() + "=" + l.GetValue()
			}
			out[name] = m.GetCounter().GetValue()
		}
	}
	return out
}

// The tokens the model activity read off its streams are exported as they
// arrive, apart from the finished calls' counts.
func TestTokensReceivedCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	n := registerTokensReceived(reg)
	n.Add(64)
	n.Add(3)
	require.Equal(t, map[string]float64{"turnstile_model_tokens_received_total": 67}, counters(t, reg))
}
