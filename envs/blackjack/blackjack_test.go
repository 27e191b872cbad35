package blackjack_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/blackjack"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
)

var _ envs.Environment = blackjack.New()

func task(rounds int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"rounds":%d}`, rounds))
}

func step(action string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"action": action})
	return b
}

// parseObs returns the OBS line of an observation; it fails the test when
// there is not exactly one.
func parseObs(t testing.TB, text string) blackjack.Observation {
	t.Helper()
	var found []string
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, blackjack.ObsPrefix); ok {
			found = append(found, rest)
		}
	}
	require.Len(t, found, 1, "observation has %d OBS lines, want 1:\n%s", len(found), text)
	dec := json.NewDecoder(strings.NewReader(found[0]))
	dec.DisallowUnknownFields()
	var o blackjack.Observation
	require.NoError(t, dec.Decode(&o), "OBS line %q", found[0])
	return o
}

func start(t testing.TB, seed int64, rounds int) (envs.Session, envs.Start) {
	t.Helper()
	s, st, err := blackjack.New().Start(seed, task(rounds))
	require.NoError(t, err, "Start(%d, %d rounds)", seed, rounds)
	return s, st
}

func TestSpec(t *testing.T) {
	sp := blackjack.New().Spec()
	require.Equal(t, "blackjack", sp.Name, "spec = %+v", sp)
	require.Equal(t, envs.ModeExportRestore, sp.Mode, "spec = %+v", sp)
	require.Equal(t, envs.StyleGym, sp.Style, "spec = %+v", sp)
	require.Len(t, sp.Tools, 1, "tools = %+v, want one valid %q tool", sp.Tools, envs.StepTool)
	require.Equal(t, envs.StepTool, sp.Tools[0].Name, "tools = %+v, want one valid %q tool", sp.Tools, envs.StepTool)
	require.True(t, json.Valid(sp.Tools[0].Parameters), "tools = %+v, want one valid %q tool", sp.Tools, envs.StepTool)
}

func TestStartRefusesBadTasks(t *testing.T) {
	for _, tt := range []string{``, `null`, `{}`, `{"rounds":0}`, `{"rounds":21}`, `{"rounds":-1}`, `{"rounds":2.5}`,
		`{"rounds":"3"}`, `{"rounds":3,"extra":1}`, `{"rounds":3} {}`, `[3]`} {
		_, _, err := blackjack.New().Start(1, json.RawMessage(tt))
		assert.Equal(t, envs.CodeBadTask, envs.CodeOf(err), "Start(%q) error = %v, want %s", tt, err, envs.CodeBadTask)
	}
}

func TestStartObservation(t *testing.T) {
	_, st := start(t, 42, 3)
	assert.NotEqual(t, "", st.Instructions, "no instructions")
	o := parseObs(t, st.Observation)
	require.Equal(t, 1, o.Hand, "start OBS = %+v", o)
	require.Equal(t, 3, o.Rounds, "start OBS = %+v", o)
	require.Equal(t, 0, o.LastReward, "start OBS = %+v", o)
	require.False(t, o.Done, "start OBS = %+v", o)
	require.GreaterOrEqual(t, o.PlayerSum, 4, "start OBS out of range: %+v", o)
	require.LessOrEqual(t, o.PlayerSum, 21, "start OBS out of range: %+v", o)
	require.GreaterOrEqual(t, o.DealerCard, 1, "start OBS out of range: %+v", o)
	require.LessOrEqual(t, o.DealerCard, 10, "start OBS out of range: %+v", o)
}

// The exact cards of a seed are part of the checkpoint format: a changed shoe
// would make older checkpoints restore into different games.
func TestShoeIsPinned(t *testing.T) {
	s, _ := start(t, 42, 2)
	const want = `{"version":1,"seed":42,"rounds":2,"rng":{"algorithm":"splitmix64","state":"78dde6e5fd29f07e","draws":4},"history":[],"current":{"player":[4,5],"dealer":[10,3]}}`
	got := string(envtest.Export(t, s))
	assert.Equal(t, want, got, "export of seed 42 =\n%s\nwant\n%s", got, want)
}

func TestStartIsDeterministic(t *testing.T) {
	distinct := map[string]bool{}
	for seed := range int64(20) {
		s1, st1 := start(t, seed, 5)
		s2, st2 := start(t, seed, 5)
		require.Equal(t, st2, st1, "seed %d: two starts differ", seed)
		require.Equal(t, string(envtest.Export(t, s2)), string(envtest.Export(t, s1)), "seed %d: two starts differ", seed)
		distinct[string(envtest.Export(t, s1))] = true
	}
	assert.GreaterOrEqual(t, len(distinct), 15, "20 seeds gave only %d distinct deals", len(distinct))
}

func TestApplyRefusalsLeaveStateUnchanged(t *testing.T) {
	tests := []struct {
		name string
		tool string
		args string
		code string
	}{
		{"unknown tool", "hit", `{"action":"hit"}`, envs.CodeUnknownTool},
		{"not JSON", envs.StepTool, `hit`, envs.CodeBadArguments},
		{"empty", envs.StepTool, ``, envs.CodeBadArguments},
		{"missing action", envs.StepTool, `{}`, envs.CodeBadArguments},
		{"null action", envs.StepTool, `{"action":null}`, envs.CodeBadArguments},
		{"numeric action", envs.StepTool, `{"action":1}`, envs.CodeBadArguments},
		{"unknown field", envs.StepTool, `{"action":"hit","bet":5}`, envs.CodeBadArguments},
		{"trailing data", envs.StepTool, `{"action":"hit"}{}`, envs.CodeBadArguments},
		{"other word", envs.StepTool, `{"action":"double"}`, envs.CodeIllegalAction},
		{"sentence", envs.StepTool, `{"action":"I will hit"}`, envs.CodeIllegalAction},
		{"empty word", envs.StepTool, `{"action":""}`, envs.CodeIllegalAction},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := start(t, 3, 2)
			before := envtest.Export(t, s)
			_, err := s.Apply(tt.tool, json.RawMessage(tt.args))
			require.Equal(t, tt.code, envs.CodeOf(err), "Apply(%s, %s) error = %v, want %s", tt.tool, tt.args, err, tt.code)
			after := envtest.Export(t, s)
			assert.Equal(t, string(after), string(before), "state changed by a refused step:\n%s\n%s", before, after)
		})
	}
}

// A model's answer may carry a newline or a capital letter.
func TestApplyAcceptsPaddedWords(t *testing.T) {
	a, _ := start(t, 5, 1)
	b, _ := start(t, 5, 1)
	oa, errA := a.Apply(envs.StepTool, step("stick"))
	ob, errB := b.Apply(envs.StepTool, step(" Stick\n"))
	require.NoError(t, errA, "stick vs padded Stick: %v %v\n%+v\n%+v", errA, errB, oa, ob)
	require.NoError(t, errB, "stick vs padded Stick: %v %v\n%+v\n%+v", errA, errB, oa, ob)
	require.Equal(t, ob, oa, "stick vs padded Stick: %v %v\n%+v\n%+v", errA, errB, oa, ob)
}

// play runs an episode to its end with the given choice of action and returns
// the outcomes.
func play(t testing.TB, s envs.Session, choose func(o blackjack.Observation) string, first string) []envs.Outcome {
	t.Helper()
	var outs []envs.Outcome
	obs := first
	for range 1000 {
		out, err := s.Apply(envs.StepTool, step(choose(parseObs(t, obs))))
		require.NoError(t, err, "step %d", len(outs)+1)
		outs = append(outs, out)
		if out.Terminated {
			return outs
		}
		obs = out.Observation
	}
	require.Fail(t, "episode did not terminate in 1000 steps")
	return nil
}

type verdictDetails struct {
	Rounds    int `json:"rounds"`
	Completed int `json:"completed"`
	Hands     []struct {
		Hand      int   `json:"hand"`
		Player    []int `json:"player"`
		Dealer    []int `json:"dealer"`
		PlayerSum int   `json:"player_sum"`
		DealerSum int   `json:"dealer_sum"`
		Reward    int   `json:"reward"`
	} `json:"hands"`
}

// value is the test's own reading of the rules, independent of the package.
func value(cards []int) int {
	sum, ace := 0, false
	for _, c := range cards {
		sum += c
		ace = ace || c == 1
	}
	if ace && sum+10 <= 21 {
		return sum + 10
	}
	return sum
}

// Over many seeds and two playing styles, every hand follows Blackjack-v1:
// a player bust loses at once with the dealer untouched, otherwise the
// dealer draws to 17 or more and the higher total wins; rewards arrive only
// on the step that ends a hand and add up to the verdict.
func TestEpisodesFollowTheRules(t *testing.T) {
	styles := map[string]func(o blackjack.Observation) string{
		"hit below 17": func(o blackjack.Observation) string {
			if o.PlayerSum < 17 {
				return "hit"
			}
			return "stick"
		},
		"always hit": func(blackjack.Observation) string { return "hit" },
	}
	for name, choose := range styles {
		t.Run(name, func(t *testing.T) {
			for seed := range int64(300) {
				rounds := 1 + int(seed%6)
				s, st := start(t, seed, rounds)
				outs := play(t, s, choose, st.Observation)

				v, err := s.Verify()
				require.NoError(t, err)
				var d verdictDetails
				require.NoError(t, json.Unmarshal(v.Details, &d))
				require.Equal(t, rounds, d.Rounds, "seed %d: details %+v", seed, d)
				require.Equal(t, rounds, d.Completed, "seed %d: details %+v", seed, d)
				require.Len(t, d.Hands, rounds, "seed %d: details %+v", seed, d)
				total := 0
				for _, h := range d.Hands {
					p, dl := value(h.Player), value(h.Dealer)
					want := 0
					switch {
					case p > 21:
						want = -1
						assert.Len(t, h.Dealer, 2, "seed %d hand %d: dealer drew after a player bust: %v", seed, h.Hand, h.Dealer)
					default:
						require.GreaterOrEqual(t, dl, 17, "seed %d hand %d: dealer %v does not stop at the first 17+", seed, h.Hand, h.Dealer)
						if len(h.Dealer) > 2 {
							require.Less(t, value(h.Dealer[:len(h.Dealer)-1]), 17, "seed %d hand %d: dealer %v does not stop at the first 17+", seed, h.Hand, h.Dealer)
						}
						if dl > 21 || p > dl {
							want = 1
						} else if p < dl {
							want = -1
						}
					}
					require.Equal(t, want, h.Reward, "seed %d hand %d: %+v, want reward %d sums %d/%d", seed, h.Hand, h, want, p, dl)
					require.Equal(t, p, h.PlayerSum, "seed %d hand %d: %+v, want reward %d sums %d/%d", seed, h.Hand, h, want, p, dl)
					require.Equal(t, dl, h.DealerSum, "seed %d hand %d: %+v, want reward %d sums %d/%d", seed, h.Hand, h, want, p, dl)
					total += h.Reward
				}

				stepSum, ends := 0.0, 0
				for i, o := range outs {
					obs := parseObs(t, o.Observation)
					require.Equal(t, i == len(outs)-1, o.Terminated, "seed %d step %d: terminated %t done %t of %d steps", seed, i+1, o.Terminated, obs.Done, len(outs))
					require.Equal(t, o.Terminated, obs.Done, "seed %d step %d: terminated %t done %t of %d steps", seed, i+1, o.Terminated, obs.Done, len(outs))
					ended := 0
					if obs.Done {
						ended = obs.Hand
					} else if obs.Hand > ends+1 {
						ended = obs.Hand - 1
					}
					switch {
					case ended > 0:
						ends = ended
						require.Equal(t, o.Reward, float64(d.Hands[ended-1].Reward), "seed %d step %d ended hand %d with reward %v (OBS %d), verdict says %d", seed, i+1, ended, o.Reward, obs.LastReward, d.Hands[ended-1].Reward)
						require.Equal(t, o.Reward, float64(obs.LastReward), "seed %d step %d ended hand %d with reward %v (OBS %d), verdict says %d", seed, i+1, ended, o.Reward, obs.LastReward, d.Hands[ended-1].Reward)
					default:
						assert.Zero(t, o.Reward, "seed %d step %d: reward on a step that did not end a hand", seed, i+1)
					}
					stepSum += o.Reward
				}
				assert.Equal(t, rounds, ends, "seed %d: saw %d hands end, want %d", seed, ends, rounds)
				require.Equal(t, float64(total), v.Reward, "seed %d: verdict %v, step rewards %v, hands %d", seed, v.Reward, stepSum, total)
				require.Equal(t, float64(total), stepSum, "seed %d: verdict %v, step rewards %v, hands %d", seed, v.Reward, stepSum, total)
			}
		})
	}
}

func TestStepAfterTerminationIsRefused(t *testing.T) {
	s, st := start(t, 9, 2)
	play(t, s, func(blackjack.Observation) string { return "stick" }, st.Observation)
	before := envtest.Export(t, s)
	for _, a := range []string{"hit", "stick", "bogus"} {
		_, err := s.Apply(envs.StepTool, step(a))
		assert.Equal(t, envs.CodeEpisodeOver, envs.CodeOf(err), "step %q after termination: %v, want %s", a, err, envs.CodeEpisodeOver)
	}
	assert.Equal(t, string(envtest.Export(t, s)), string(before), "state changed after termination")
	// The finished episode still exports and restores.
	r, err := blackjack.New().Restore(before)
	require.NoError(t, err, "restore finished episode")
	assert.Equal(t, string(envtest.Export(t, r)), string(before), "finished episode does not round-trip")
}

func TestVerifyBeforeTheEnd(t *testing.T) {
	s, _ := start(t, 11, 4)
	before := envtest.Export(t, s)
	v, err := s.Verify()
	require.NoError(t, err, "verify before any hand ended: %+v %v", v, err)
	require.Equal(t, float64(0), v.Reward, "verify before any hand ended: %+v %v", v, err)
	assert.Equal(t, string(envtest.Export(t, s)), string(before), "Verify changed state")
}

func TestGenerateTask(t *testing.T) {
	seen := map[string]bool{}
	for i := range 200 {
		a, b := blackjack.GenerateTask(7, i), blackjack.GenerateTask(7, i)
		require.Equal(t, string(b), string(a), "task %d differs between calls: %s %s", i, a, b)
		_, _, err := blackjack.New().Start(1, a)
		require.NoError(t, err, "generated task %s refused", a)
		seen[string(a)] = true
	}
	assert.GreaterOrEqual(t, len(seen), 5, "200 tasks show only %d distinct round counts", len(seen))
	assert.False(t, bytes.Equal(blackjack.GenerateTask(1, 0), blackjack.GenerateTask(2, 0)) &&
		bytes.Equal(blackjack.GenerateTask(1, 1), blackjack.GenerateTask(2, 1)) &&
		bytes.Equal(blackjack.GenerateTask(1, 2), blackjack.GenerateTask(2, 2)), "task set does not depend on its seed")
}
