package trainer

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/turnstile-rl/turnstile/envs/catalog"
)

// UnknownEnv groups rollouts whose environment could not be read.
const UnknownEnv = "(unknown)"

// Summary condenses set overall and per environment, from its latest runs
// and their results, and the rollouts its admission has not started yet.
func (c *Client) Summary(ctx context.Context, set string) (SetSummary, error) {
	queued, byEnv, err := queuedOf(ctx, c.tc, set)
	if err != nil {
		return SetSummary{}, err
	}
	recs, err := c.collect(ctx, set)
	if err != nil {
		return SetSummary{}, err
	}
	sum := SetSummary{Overall: Summarize(recs), ByEnv: SummarizeByEnv(recs)}
	sum.AddQueued(queued, byEnv)
	return sum, nil
}

// AddQueued counts queued rollouts (byEnv per environment) into s: they
// are rollouts of the set, neither running nor finished.
func (s *SetSummary) AddQueued(queued int, byEnv map[string]int) {
	s.Overall.Queued += queued
	s.Overall.Rollouts += queued
	for env, n := range byEnv {
		i := slices.IndexFunc(s.ByEnv, func(e EnvSummary) bool { return e.Env == env })
		if i < 0 {
			s.ByEnv = append(s.ByEnv, EnvSummary{Env: env})
			i = len(s.ByEnv) - 1
		}
		s.ByEnv[i].Queued += n
		s.ByEnv[i].Rollouts += n
	}
	slices.SortFunc(s.ByEnv, func(a, b EnvSummary) int { return strings.Compare(a.Env, b.Env) })
}

// CountStatus counts recs by RolloutPhase and execution status. A run that
// never set its phase counts as "(none)".
func CountStatus(recs []RolloutRecord) StatusCounts {
	c := StatusCounts{Phases: map[string]int{}, Statuses: map[string]int{}}
	for _, r := range recs {
		phase := r.Phase
		if phase == "" {
			phase = "(none)"
		}
		c.Phases[phase]++
		c.Statuses[StatusName(r.Status)]++
	}
	return c
}

// tally accumulates the counts and means both summaries share.
type tally struct {
	rollouts, completed, failed, running, passed int
	reward, turns                                float64
	withResult                                   int
}

// add counts r; a completed result passes by env's rule.
func (t *tally) add(r RolloutRecord, env string) {
	t.rollouts++
	switch {
	case r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		t.completed++
		if r.Result != nil {
			t.withResult++
			t.reward += r.Result.Reward
			t.turns += float64(r.Result.Turns)
			if Passed(env, r.Result.Reward) {
				t.passed++
			}
		}
	case r.Closed():
		t.failed++
	default:
		t.running++
	}
}

// means are the mean reward and turns over completed rollouts whose result
// was read; 0 for none.
func (t *tally) means() (reward, turns float64) {
	if t.withResult == 0 {
		return 0, 0
	}
	return t.reward / float64(t.withResult), t.turns / float64(t.withResult)
}

// Summarize condenses the latest runs of a set.
func Summarize(recs []RolloutRecord) Summary {
	var (
		t              tally
		completedTimes []time.Duration
	)
	for _, r := range recs {
		t.add(r, r.Env)
		if r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED && !r.Close.IsZero() && !r.Start.IsZero() {
			completedTimes = append(completedTimes, r.Close.Sub(r.Start))
		}
	}
	s := Summary{Rollouts: t.rollouts, Completed: t.completed, Failed: t.failed, Running: t.running}
	s.MeanReward, s.MeanTurns = t.means()
	s.P50 = Percentile(completedTimes, 50)
	s.P95 = Percentile(completedTimes, 95)
	return s
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of ds by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. It is always one of the values; 0 for none. ds is not changed.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	// p*n/100 rather than p/100*n: 95*20/100 is exactly 19.
	rank := int(math.Ceil(p * float64(len(sorted)) / 100))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// Passed reports whether a completed rollout of env with reward counts as a
// pass, by the environment's catalog entry: reward > 0 for dense-reward
// environments (a blackjack episode that wins more hands than it loses),
// reward >= 1 for the rest, and for environments the catalog does not know.
func Passed(env string, reward float64) bool {
	e, _ := catalog.Lookup(env) // the zero entry is not dense
	return e.Passed(reward)
}

// SummarizeByEnv condenses the latest runs of a set per environment, sorted
// by environment name; a record without an environment counts under
// UnknownEnv.
func SummarizeByEnv(recs []RolloutRecord) []EnvSummary {
	byEnv := map[string]*tally{}
	for _, r := range recs {
		env := r.Env
		if env == "" {
			env = UnknownEnv
		}
		t := byEnv[env]
		if t == nil {
			t = &tally{}
			byEnv[env] = t
		}
		t.add(r, env)
	}
	out := make([]EnvSummary, 0, len(byEnv))
	for env, t := range byEnv {
		s := EnvSummary{Env: env, Rollouts: t.rollouts, Completed: t.completed, Failed: t.failed, Running: t.running, Passed: t.passed}
		s.MeanReward, s.MeanTurns = t.means()
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b EnvSummary) int { return strings.Compare(a.Env, b.Env) })
	return out
}
