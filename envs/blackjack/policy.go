package blackjack

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

const (
	// blackjackObsPrefix starts the machine-readable line of the blackjack
	// environment's observations: OBS {"player_sum":…,"dealer_card":…,…}.
	blackjackObsPrefix = "OBS "
	// blackjackSalt separates this policy's episode draws from other
	// policies' given the same seed and task.
	blackjackSalt = "blackjack"
)

// Policy is the scripted policy of the blackjack environment (gym style):
// it reads the latest OBS line and plays basic strategy. Its answer is the
// bare action word, with no tool call; the agent loop turns it into a step.
//
// With probability the request's Imperfection per decision it plays the other
// action. Decision k of an episode uses the k-th draw of the episode's
// generator (k = number of assistant messages so far), so a restored
// conversation makes the same decisions as an uninterrupted one.
type Policy struct{}

// blackjackObs is the part of an OBS line the policy needs. Unknown fields
// are ignored, as a model would.
type blackjackObs struct {
	PlayerSum  *int  `json:"player_sum"`
	DealerCard *int  `json:"dealer_card"`
	UsableAce  *bool `json:"usable_ace"`
}

// Respond returns the next assistant message. It depends only on req.
func (Policy) Respond(req envs.PolicyRequest) (envs.PolicyResponse, error) {
	obs, err := lastBlackjackObs(req.Messages)
	if err != nil {
		return envs.PolicyResponse{}, fmt.Errorf("blackjack policy: %w", err)
	}
	action := blackjackBasicStrategy(*obs.PlayerSum, *obs.DealerCard, *obs.UsableAce)
	if blackjackMistake(req) {
		action = blackjackOther(action)
	}
	return envs.PolicyResponse{Content: action}, nil
}

// blackjackBasicStrategy is a simplified basic strategy for Policy-v1 (no
// doubling or splitting). dealer is the dealer's shown card, 1 for an ace.
func blackjackBasicStrategy(sum, dealer int, soft bool) string {
	switch {
	case soft && sum <= 17:
		return ActionHit
	case soft, sum >= 17:
		return ActionStick
	case sum <= 11:
		return ActionHit
	case dealer >= 2 && dealer <= 6:
		return ActionStick
	default:
		return ActionHit
	}
}

func blackjackOther(action string) string {
	if action == ActionHit {
		return ActionStick
	}
	return ActionHit
}

// blackjackMistake tells whether this decision deviates from the strategy.
func blackjackMistake(req envs.PolicyRequest) bool {
	decisions := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			decisions++
		}
	}
	r := envs.EpisodeRand(req.Seed, req.Messages, blackjackSalt)
	for range decisions {
		r.Float64()
	}
	return r.Float64() < req.Imperfection
}

// lastBlackjackObs parses the last OBS line of the latest user or tool
// message that has one. A message without one (a refusal of the previous
// answer) leaves the state it showed before in force.
func lastBlackjackObs(msgs []envs.Message) (blackjackObs, error) {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != "user" && m.Role != "tool" {
			continue
		}
		line, ok := blackjackLastLine(m.Content, blackjackObsPrefix)
		if !ok {
			continue
		}
		var o blackjackObs
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, blackjackObsPrefix)), &o); err != nil {
			return blackjackObs{}, fmt.Errorf("message %d: malformed OBS line %q: %w", i, line, err)
		}
		switch {
		case o.PlayerSum == nil || o.DealerCard == nil || o.UsableAce == nil:
			return blackjackObs{}, fmt.Errorf("message %d: OBS line %q lacks player_sum, dealer_card or usable_ace", i, line)
		case *o.DealerCard < 1 || *o.DealerCard > 10:
			return blackjackObs{}, fmt.Errorf("message %d: dealer_card %d outside 1..10", i, *o.DealerCard)
		case *o.PlayerSum < 2:
			return blackjackObs{}, fmt.Errorf("message %d: player_sum %d below 2", i, *o.PlayerSum)
		}
		return o, nil
	}
	return blackjackObs{}, errors.New(`no user or tool message has an "OBS {...}" line`)
}

// blackjackLastLine returns the last line of text that starts with prefix,
// with surrounding space trimmed.
func blackjackLastLine(text, prefix string) (string, bool) {
	found, ok := "", false
	for line := range strings.Lines(text) {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, prefix) {
			found, ok = line, true
		}
	}
	return found, ok
}
