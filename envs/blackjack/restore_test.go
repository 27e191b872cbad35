package blackjack_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/blackjack"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
)

// midGame returns an exported two-hand episode whose first hand ended with
// the dealer drawing and whose current hand has had one hit, so every part
// of the state is populated.
func midGame(t *testing.T) json.RawMessage {
	t.Helper()
	for seed := range int64(2000) {
		s, _ := start(t, seed, 2)
		out, err := s.Apply(envs.StepTool, step("stick"))
		require.NoError(t, err)
		var st struct {
			History []struct{ Dealer []int } `json:"history"`
		}
		require.NoError(t, json.Unmarshal(envtest.Export(t, s), &st))
		if len(st.History[0].Dealer) < 3 || parseObs(t, out.Observation).PlayerSum > 11 {
			continue
		}
		_, err = s.Apply(envs.StepTool, step("hit"))
		require.NoError(t, err)
		return envtest.Export(t, s)
	}
	require.Fail(t, "no seed below 2000 gives a dealer draw followed by a hand of 11 or less")
	return nil
}

const gamma = 0x9e3779b97f4a7c15

func TestRestoreRefusesBadStates(t *testing.T) {
	base := midGame(t)
	type state = map[string]any
	hist0 := func(m state) state { return m["history"].([]any)[0].(state) }
	cur := func(m state) state { return m["current"].(state) }
	rng := func(m state) state { return m["rng"].(state) }
	setCard := func(h state, who string, i int, v any) { h[who].([]any)[i] = v }
	num := func(v any) int64 {
		n, err := v.(json.Number).Int64()
		require.NoError(t, err)
		return n
	}

	tests := []struct {
		name   string
		raw    string                 // used instead of base when set
		mutate func(m map[string]any) // applied to base
		want   string                 // part of the error message
	}{
		{name: "unchanged", mutate: func(state) {}},
		{name: "empty", raw: " ", want: "empty"},
		{name: "null", raw: "null", want: "version"},
		{name: "not JSON", raw: "{", want: "EOF"},
		{name: "trailing data", raw: string(base) + "{}", want: "trailing"},
		{name: "unknown field", mutate: func(m state) { m["bet"] = 1 }, want: "unknown field"},
		{name: "unknown nested field", mutate: func(m state) { cur(m)["split"] = true }, want: "unknown field"},
		{name: "version", mutate: func(m state) { m["version"] = 2 }, want: "version"},
		{name: "no version", mutate: func(m state) { delete(m, "version") }, want: "version"},
		{name: "rounds 0", mutate: func(m state) { m["rounds"] = 0 }, want: "rounds"},
		{name: "rounds 21", mutate: func(m state) { m["rounds"] = 21 }, want: "rounds"},
		{name: "fewer rounds than hands", mutate: func(m state) { m["rounds"] = 1 }, want: "current hand present"},
		{name: "history null", mutate: func(m state) { m["history"] = nil }, want: "history"},
		{name: "history missing", mutate: func(m state) { delete(m, "history") }, want: "history"},
		{name: "current missing", mutate: func(m state) { m["current"] = nil }, want: "current hand present"},
		{name: "reward missing", mutate: func(m state) { delete(hist0(m), "reward") }, want: "missing reward"},
		{name: "reward changed", mutate: func(m state) { hist0(m)["reward"] = (num(hist0(m)["reward"])+2)%3 - 1 }, want: "not what seed"},
		{name: "card 11", mutate: func(m state) { setCard(cur(m), "player", 0, 11) }, want: "card value 11"},
		{name: "card 0", mutate: func(m state) { setCard(hist0(m), "dealer", 1, 0) }, want: "card value 0"},
		{name: "card not a number", mutate: func(m state) { setCard(cur(m), "dealer", 0, "A") }, want: "cannot unmarshal"},
		{name: "one card", mutate: func(m state) { cur(m)["player"] = []any{5} }, want: "dealt 2"},
		{name: "current hand busted", mutate: func(m state) { cur(m)["player"] = []any{10, 10, 5} }, want: "past a bust"},
		{name: "dealer drew early", mutate: func(m state) { cur(m)["dealer"] = append(cur(m)["dealer"].([]any), 2) }, want: "before the player stuck"},
		{name: "dealer stopped low", mutate: func(m state) { hist0(m)["dealer"] = []any{10, 5} }, want: "below 17"},
		{name: "another legal card", mutate: func(m state) {
			d := cur(m)["dealer"].([]any)
			d[1] = num(d[1])%10 + 1
		}, want: "not what seed"},
		{name: "other seed", mutate: func(m state) { m["seed"] = num(m["seed"]) + 1 }, want: "rng state"},
		{name: "rng algorithm", mutate: func(m state) { rng(m)["algorithm"] = "pcg" }, want: "algorithm"},
		{name: "rng state not hex", mutate: func(m state) { rng(m)["state"] = "zzzzzzzzzzzzzzzz" }, want: "rng state"},
		{name: "rng state short", mutate: func(m state) { rng(m)["state"] = "abc" }, want: "16 lowercase"},
		{name: "rng state upper case", mutate: func(m state) { rng(m)["state"] = strings.ToUpper(rng(m)["state"].(string)) }, want: "16 lowercase"},
		{name: "rng state off by one", mutate: func(m state) {
			var v uint64
			fmt.Sscanf(rng(m)["state"].(string), "%x", &v)
			rng(m)["state"] = fmt.Sprintf("%016x", v+1)
		}, want: "rng state"},
		{name: "rng ahead of the cards", mutate: func(m state) {
			var v uint64
			fmt.Sscanf(rng(m)["state"].(string), "%x", &v)
			rng(m)["state"] = fmt.Sprintf("%016x", v+gamma)
			rng(m)["draws"] = num(rng(m)["draws"]) + 1
		}, want: "rng draws"},
		{name: "negative draws", mutate: func(m state) { rng(m)["draws"] = -1 }, want: "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.raw)
			if tt.raw == "" {
				dec := json.NewDecoder(bytes.NewReader(base))
				dec.UseNumber()
				var m map[string]any
				require.NoError(t, dec.Decode(&m))
				tt.mutate(m)
				var err error
				data, err = json.Marshal(m)
				require.NoError(t, err)
			}
			s, err := blackjack.New().Restore(data)
			if tt.want == "" {
				require.NoError(t, err, "Restore(valid state)")
				got := envtest.Export(t, s)
				require.Equal(t, string(base), string(got), "round trip:\n%s\n%s", got, base)
				return
			}
			require.Equal(t, envs.CodeBadState, envs.CodeOf(err), "Restore(%s) error = %v, want %s mentioning %q", data, err, envs.CodeBadState, tt.want)
			require.ErrorContains(t, err, tt.want, "Restore(%s) error = %v, want %s mentioning %q", data, err, envs.CodeBadState, tt.want)
		})
	}
}

type stepResult struct {
	Outcome envs.Outcome
	Code    string
}

func runSteps(t *rapid.T, s envs.Session, actions []string) []stepResult {
	var res []stepResult
	for _, a := range actions {
		out, err := s.Apply(envs.StepTool, step(a))
		if err != nil {
			require.NotEmpty(t, envs.CodeOf(err), "step %q: untyped error %v", a, err)
		}
		res = append(res, stepResult{out, envs.CodeOf(err)})
	}
	return res
}

func mustExport(t *rapid.T, s envs.Session) []byte {
	b, err := s.Export()
	require.NoError(t, err, "Export")
	return b
}

// Interrupting an episode anywhere (export, restore into a fresh session)
// changes nothing about what follows, and export∘restore∘export is the
// identity.
func TestExportRestoreContinuesLikeUninterrupted(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Int64().Draw(t, "seed")
		rounds := rapid.IntRange(blackjack.MinRounds, blackjack.MaxRounds).Draw(t, "rounds")
		actions := rapid.SliceOfN(rapid.SampledFrom([]string{"hit", "stick", "hit", "stick", "fold"}), 0, 80).Draw(t, "actions")
		cut := rapid.IntRange(0, len(actions)).Draw(t, "cut")
		env := blackjack.New()

		a, _, err := env.Start(seed, task(rounds))
		require.NoError(t, err)
		want := runSteps(t, a, actions)

		b, _, err := env.Start(seed, task(rounds))
		require.NoError(t, err)
		got := runSteps(t, b, actions[:cut])
		saved := mustExport(t, b)
		c, err := env.Restore(saved)
		require.NoError(t, err, "Restore(own export after %d steps): %v\n%s", cut, err, saved)
		again := mustExport(t, c)
		require.Equal(t, string(saved), string(again), "export∘restore∘export differs:\n%s\n%s", saved, again)
		got = append(got, runSteps(t, c, actions[cut:])...)

		for i := range want {
			require.Equal(t, want[i], got[i], "step %d (%q) after a cut at %d:\n got %+v\nwant %+v", i+1, actions[i], cut, got[i], want[i])
		}
		ea, ec := mustExport(t, a), mustExport(t, c)
		require.Equal(t, string(ec), string(ea), "end states differ:\n%s\n%s", ea, ec)
		va, _ := a.Verify()
		vc, _ := c.Verify()
		require.Equal(t, vc.Reward, va.Reward, "verdicts differ: %+v vs %+v", va, vc)
		require.Equal(t, string(vc.Details), string(va.Details), "verdicts differ: %+v vs %+v", va, vc)
	})
}

func FuzzRestore(f *testing.F) {
	for seed := range int64(4) {
		s, _, err := blackjack.New().Start(seed, task(3))
		require.NoError(f, err)
		for _, a := range []string{"hit", "stick", "stick", "hit", "stick", "stick", "stick"} {
			b, _ := s.Export()
			f.Add([]byte(b))
			if _, err := s.Apply(envs.StepTool, step(a)); envs.CodeOf(err) == envs.CodeEpisodeOver {
				break
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := blackjack.New().Restore(data)
		if err != nil {
			require.Equal(t, envs.CodeBadState, envs.CodeOf(err), "refusal with code %q: %v", envs.CodeOf(err), err)
			return
		}
		e1 := envtest.Export(t, s)
		s2, err := blackjack.New().Restore(e1)
		require.NoError(t, err, "own export refused")
		e2 := envtest.Export(t, s2)
		require.Equal(t, string(e2), string(e1), "export not stable:\n%s\n%s", e1, e2)
		_, _ = s.Apply(envs.StepTool, step("hit"))
	})
}
