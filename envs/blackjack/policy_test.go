package blackjack_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/blackjack"
)

func blackjackObs(sum, dealer int, soft bool) string {
	return fmt.Sprintf("Hand 1 of 3: …\nOBS {\"player_sum\":%d,\"dealer_card\":%d,\"usable_ace\":%t,\"hand\":1,\"rounds\":3,\"last_reward\":0}", sum, dealer, soft)
}

// blackjackConversation is system, the first observation as a user message,
// then per later observation an assistant action and a user message.
func blackjackConversation(first string, later ...string) []envs.Message {
	msgs := []envs.Message{{Role: "system", Content: "You play blackjack."}, {Role: "user", Content: first}}
	for _, obs := range later {
		msgs = append(msgs, envs.Message{Role: "assistant", Content: "hit"}, envs.Message{Role: "user", Content: obs})
	}
	return msgs
}

func TestBlackjackBasicStrategy(t *testing.T) {
	tests := []struct {
		sum, dealer int
		soft        bool
		want        string
	}{
		{5, 10, false, "hit"},
		{11, 6, false, "hit"},
		{12, 2, false, "stick"},
		{12, 1, false, "hit"},
		{13, 6, false, "stick"},
		{16, 7, false, "hit"},
		{16, 10, false, "hit"},
		{17, 10, false, "stick"},
		{17, 1, false, "stick"},
		{21, 5, false, "stick"},
		{13, 4, true, "hit"},
		{17, 4, true, "hit"},
		{18, 10, true, "stick"},
		{21, 1, true, "stick"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d_%d_soft=%t", tt.sum, tt.dealer, tt.soft), func(t *testing.T) {
			req := envs.PolicyRequest{Messages: blackjackConversation(blackjackObs(tt.sum, tt.dealer, tt.soft)), Seed: 1}
			got, err := blackjack.Policy{}.Respond(req)
			require.NoError(t, err)
			want := (envs.PolicyResponse{Content: tt.want})
			assert.Equal(t, want, got, "Respond = %+v, want %+v", got, want)
			req.Imperfection = 1
			got, err = blackjack.Policy{}.Respond(req)
			require.NoError(t, err)
			require.NotEqual(t, tt.want, got.Content, "with imperfection 1: %q, want the other action than %q", got.Content, tt.want)
			require.Contains(t, []string{"hit", "stick"}, got.Content, "with imperfection 1: want the other action than %q", tt.want)
		})
	}
}

func TestBlackjackReadsTheLatestObservation(t *testing.T) {
	tests := []struct {
		name string
		msgs []envs.Message
		want string
	}{
		{"latest user message", blackjackConversation(blackjackObs(5, 3, false), blackjackObs(19, 3, false)), "stick"},
		{"latest tool message", append(blackjackConversation(blackjackObs(5, 3, false)),
			envs.Message{Role: "assistant", ToolCalls: []envs.ToolCall{{ID: "c", Name: "step", Arguments: `{"action":"hit"}`}}},
			envs.Message{Role: "tool", ToolCallID: "c", Content: blackjackObs(20, 3, false)}), "stick"},
		{"a refusal keeps the previous state", blackjackConversation(blackjackObs(5, 3, false), "illegal_action: answer hit or stick"), "hit"},
		{"the last OBS line of a message", blackjackConversation(blackjackObs(19, 3, false) + "\n" + blackjackObs(8, 3, false)), "hit"},
		{"assistant text is not an observation", append(blackjackConversation(blackjackObs(5, 3, false)),
			envs.Message{Role: "assistant", Content: blackjackObs(20, 3, false)}), "hit"},
		{"unknown OBS fields are ignored", blackjackConversation(`OBS {"player_sum":18,"dealer_card":9,"usable_ace":false,"shoe":"x"}`), "stick"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := blackjack.Policy{}.Respond(envs.PolicyRequest{Messages: tt.msgs})
			require.NoError(t, err, "Respond = %+v, %v; want %q", got, err, tt.want)
			require.Equal(t, tt.want, got.Content, "Respond = %+v, %v; want %q", got, err, tt.want)
			require.Nil(t, got.ToolCalls, "Respond = %+v, %v; want %q", got, err, tt.want)
		})
	}
}

func TestBlackjackRefusesUnreadableObservations(t *testing.T) {
	for name, first := range map[string]string{
		"no OBS line":     "Hand 1 of 3: your cards 10, 6.",
		"malformed":       "OBS {player_sum:1",
		"missing sum":     `OBS {"dealer_card":9,"usable_ace":false}`,
		"missing ace":     `OBS {"player_sum":12,"dealer_card":9}`,
		"dealer card 11":  `OBS {"player_sum":12,"dealer_card":11,"usable_ace":false}`,
		"dealer card 0":   `OBS {"player_sum":12,"dealer_card":0,"usable_ace":false}`,
		"impossible sum":  `OBS {"player_sum":1,"dealer_card":5,"usable_ace":false}`,
		"sum not integer": `OBS {"player_sum":"12","dealer_card":5,"usable_ace":false}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := (blackjack.Policy{}).Respond(envs.PolicyRequest{Messages: blackjackConversation(first)})
			assert.Error(t, err, "no error")
		})
	}
	_, err := (blackjack.Policy{}).Respond(envs.PolicyRequest{})
	assert.Error(t, err, "no messages: no error")
}

// playBlackjack runs an episode of the blackjack environment against the
// policy, observations as user messages, and returns the sum of the step
// rewards and the conversation.
func playBlackjack(t *testing.T, seed int64, rounds int, imperfection float64) (float64, []envs.Message) {
	t.Helper()
	s, st, err := blackjack.New().Start(seed, json.RawMessage(fmt.Sprintf(`{"rounds":%d}`, rounds)))
	require.NoError(t, err)
	msgs := []envs.Message{{Role: "system", Content: st.Instructions}, {Role: "user", Content: st.Observation}}
	total := 0.0
	for range 200 {
		resp, err := blackjack.Policy{}.Respond(envs.PolicyRequest{Messages: msgs, Seed: seed, Imperfection: imperfection})
		require.NoError(t, err, "seed %d", seed)
		args, _ := json.Marshal(map[string]string{"action": resp.Content})
		out, err := s.Apply(envs.StepTool, args)
		require.NoError(t, err, "seed %d: step %q", seed, resp.Content)
		total += out.Reward
		msgs = append(msgs, envs.Message{Role: "assistant", Content: resp.Content}, envs.Message{Role: "user", Content: out.Observation})
		if out.Terminated {
			return total, msgs
		}
	}
	require.Failf(t, "no end", "seed %d: episode did not end", seed)
	return 0, nil
}

// Against the real environment: every answer is a legal step, the same seed
// gives the same game, basic strategy beats hitting blindly, and
// imperfection changes some decisions but not all.
func TestBlackjackPlaysTheEnvironment(t *testing.T) {
	var perfect, sloppy float64
	changed := 0
	for seed := range int64(200) {
		p, pm := playBlackjack(t, seed, 5, 0)
		p2, pm2 := playBlackjack(t, seed, 5, 0)
		require.Equal(t, p2, p, "seed %d: two runs differ", seed)
		require.Equal(t, pm2, pm, "seed %d: two runs differ", seed)
		s, sm := playBlackjack(t, seed, 5, 0.5)
		perfect += p
		sloppy += s
		if !reflect.DeepEqual(pm, sm) {
			changed++
		}
	}
	assert.Greater(t, perfect, sloppy, "basic strategy scored %v over 1000 hands, half-random play %v", perfect, sloppy)
	assert.GreaterOrEqual(t, changed, 150, "imperfection 0.5 changed only %d of 200 episodes", changed)
}

// The decision at position k depends on k, not only on the episode: with
// imperfection 0.5 the same observation is answered both ways at different
// positions, and each position always the same way.
func TestBlackjackImperfectionPerDecision(t *testing.T) {
	obs := blackjackObs(12, 10, false) // strategy: hit
	msgs := blackjackConversation(obs)
	mistakes := 0
	const positions = 200
	for range positions {
		req := envs.PolicyRequest{Messages: msgs, Seed: 7, Imperfection: 0.5}
		a, err := blackjack.Policy{}.Respond(req)
		require.NoError(t, err)
		b, _ := blackjack.Policy{}.Respond(req)
		require.Equal(t, b, a, "same request, different answers: %+v %+v", a, b)
		if a.Content == "stick" {
			mistakes++
		}
		msgs = append(msgs, envs.Message{Role: "assistant", Content: a.Content}, envs.Message{Role: "user", Content: obs})
	}
	require.GreaterOrEqual(t, mistakes, positions/4, "%d mistakes in %d decisions at imperfection 0.5", mistakes, positions)
	require.LessOrEqual(t, mistakes, positions*3/4, "%d mistakes in %d decisions at imperfection 0.5", mistakes, positions)
}
