// Package blackjack is a Gymnasium-style environment: Blackjack-v1 rules
// (natural off, sab off) played for a number of hands from one seeded,
// infinite shoe. Its whole state is plain integers, so it exports and
// restores exactly: a restored episode deals the same cards.
package blackjack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"reflect"
	"strconv"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

// Name is the environment's name.
const Name = "blackjack"

// Actions a step accepts.
const (
	ActionHit   = "hit"
	ActionStick = "stick"
)

// ObsPrefix starts the machine-readable line of every observation.
const ObsPrefix = "OBS "

// Limits of the task.
const (
	MinRounds = 1
	MaxRounds = 20
)

// stateVersion is the version of the exported state format.
const stateVersion = 1

// rngAlgorithm names the shoe's generator in the exported state.
const rngAlgorithm = "splitmix64"

// Task is one episode's task.
type Task struct {
	Rounds int `json:"rounds"`
}

// Observation is the machine-readable part of an observation (the OBS line).
type Observation struct {
	PlayerSum  int  `json:"player_sum"`
	DealerCard int  `json:"dealer_card"` // 1 is an ace
	UsableAce  bool `json:"usable_ace"`
	Hand       int  `json:"hand"` // 1-based number of the hand shown
	Rounds     int  `json:"rounds"`
	LastReward int  `json:"last_reward"` // reward of the previous hand; 0 before the first ends
	Done       bool `json:"done"`
}

const instructions = `You are playing blackjack against a dealer, for several hands in a row.
Cards count their face value, face cards count 10 and an ace counts 1 or 11. Aim for a total closer to 21 than the dealer without going over.
Each turn, answer with exactly one word: "hit" to draw a card, or "stick" to stop; the dealer then draws until 17 or more.
A win scores +1, a loss -1 and a draw 0. Each observation ends with a line "OBS {...}" describing the state as JSON.`

var stepSchema = json.RawMessage(`{"type":"object","properties":{"action":{"type":"string","enum":["hit","stick"]}},"required":["action"],"additionalProperties":false}`)

// Env is the blackjack environment. It holds no state and is safe for
// concurrent use.
type Env struct{}

// New returns the environment.
func New() *Env { return &Env{} }

// Spec declares a restorable, Gymnasium-style environment with one step tool.
func (*Env) Spec() envs.Spec {
	return envs.Spec{
		Name:  Name,
		Mode:  envs.ModeExportRestore,
		Style: envs.StyleGym,
		Tools: []envs.Tool{{
			Name:        envs.StepTool,
			Description: `Play one action in the current hand: "hit" or "stick".`,
			Parameters:  stepSchema,
		}},
	}
}

// Start deals the first hand of an episode of task.Rounds hands from the
// shoe seeded with seed.
func (*Env) Start(seed int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	var t Task
	if err := decodeStrict(task, &t); err != nil {
		return nil, envs.Start{}, envs.Errorf(envs.CodeBadTask, "blackjack task: %v", err)
	}
	if t.Rounds < MinRounds || t.Rounds > MaxRounds {
		return nil, envs.Start{}, envs.Errorf(envs.CodeBadTask, "blackjack task: rounds %d outside %d..%d", t.Rounds, MinRounds, MaxRounds)
	}
	s := newSession(seed, t.Rounds)
	start := envs.Start{
		Instructions: instructions,
		Observation:  fmt.Sprintf("Blackjack, %d hand(s).\n%s", t.Rounds, s.describeCurrent()),
	}
	return s, start, nil
}

// Restore rebuilds a session from Export output. It replays the shoe from the
// seed and accepts the state only if every card, reward and the generator's
// position agree with that replay.
func (*Env) Restore(state json.RawMessage) (envs.Session, error) {
	var st exportedState
	if err := decodeStrict(state, &st); err != nil {
		return nil, envs.Errorf(envs.CodeBadState, "blackjack state: %v", err)
	}
	s, err := fromExported(st)
	if err != nil {
		return nil, envs.Errorf(envs.CodeBadState, "blackjack state: %v", err)
	}
	return s, nil
}

// GenerateTask returns task number index of the task set seeded with seed:
// 2 to 8 hands, so most episodes take many steps.
func GenerateTask(seed int64, index int) json.RawMessage {
	r := mix(mix(uint64(seed)) + uint64(int64(index))*gamma + 0x626c61636b6a6163) // salt "blackjac"
	b, _ := json.Marshal(Task{Rounds: 2 + int(r%7)})
	return b
}

// shoe is an infinite shoe drawn with splitmix64. Its whole state is the
// seed and the number of cards drawn; state is kept as the generator sees it.
type shoe struct {
	seed  int64
	state uint64
	draws uint64
}

const gamma = 0x9e3779b97f4a7c15

// deck is one suit: ace, 2–9 and four ten-valued cards, as in Gymnasium.
var deck = [13]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10, 10}

func newShoe(seed int64) shoe { return shoe{seed: seed, state: uint64(seed)} }

// stateAfter is the generator state of seed's shoe after draws cards.
func stateAfter(seed int64, draws uint64) uint64 { return uint64(seed) + draws*gamma }

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (s *shoe) draw() int {
	s.state += gamma
	s.draws++
	hi, _ := bits.Mul64(mix(s.state), uint64(len(deck)))
	return deck[hi]
}

// handValue is the best total of cards and whether an ace counts 11.
func handValue(cards []int) (int, bool) {
	sum, ace := 0, false
	for _, c := range cards {
		sum += c
		ace = ace || c == 1
	}
	if ace && sum+10 <= 21 {
		return sum + 10, true
	}
	return sum, false
}

func isBust(cards []int) bool { v, _ := handValue(cards); return v > 21 }

// score is a hand's value for comparison; a bust scores 0.
func score(cards []int) int {
	if v, _ := handValue(cards); v <= 21 {
		return v
	}
	return 0
}

// dealerDone tells whether the dealer stops drawing.
func dealerDone(cards []int) bool { v, _ := handValue(cards); return v >= 17 }

func compare(player, dealer []int) int {
	p, d := score(player), score(dealer)
	switch {
	case p > d:
		return 1
	case p < d:
		return -1
	default:
		return 0
	}
}

type hand struct {
	Player []int `json:"player"`
	Dealer []int `json:"dealer"`
}

type finishedHand struct {
	Player []int `json:"player"`
	Dealer []int `json:"dealer"`
	Reward *int  `json:"reward"` // pointer so that a missing reward is refused
}

type session struct {
	rounds  int
	shoe    shoe
	history []finishedHand
	cur     *hand // nil once the last hand has ended
}

func newSession(seed int64, rounds int) *session {
	s := &session{rounds: rounds, shoe: newShoe(seed), history: []finishedHand{}}
	s.deal()
	return s
}

// deal starts the next hand: the dealer's two cards, then the player's, as
// Gymnasium's reset draws them.
func (s *session) deal() {
	d1, d2 := s.shoe.draw(), s.shoe.draw()
	p1, p2 := s.shoe.draw(), s.shoe.draw()
	s.cur = &hand{Player: []int{p1, p2}, Dealer: []int{d1, d2}}
}

// act plays one legal action on the current hand; it returns the hand's
// reward when the hand ended.
func (s *session) act(action string) (reward int, ended bool) {
	h := s.cur
	switch action {
	case ActionHit:
		h.Player = append(h.Player, s.shoe.draw())
		if !isBust(h.Player) {
			return 0, false
		}
		reward = -1
	case ActionStick:
		for !dealerDone(h.Dealer) {
			h.Dealer = append(h.Dealer, s.shoe.draw())
		}
		reward = compare(h.Player, h.Dealer)
	}
	r := reward
	s.history = append(s.history, finishedHand{Player: h.Player, Dealer: h.Dealer, Reward: &r})
	s.cur = nil
	if len(s.history) < s.rounds {
		s.deal()
	}
	return reward, true
}

type stepArgs struct {
	Action *string `json:"action"`
}

// Apply plays one step. Refusals leave the session unchanged.
func (s *session) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	if tool != envs.StepTool {
		return envs.Outcome{}, envs.Errorf(envs.CodeUnknownTool, "blackjack has no tool %q (only %q)", tool, envs.StepTool)
	}
	if s.cur == nil {
		return envs.Outcome{}, envs.Errorf(envs.CodeEpisodeOver, "all %d hands are over", s.rounds)
	}
	var a stepArgs
	if err := decodeStrict(args, &a); err != nil {
		return envs.Outcome{}, envs.Errorf(envs.CodeBadArguments, "step arguments: %v", err)
	}
	if a.Action == nil {
		return envs.Outcome{}, envs.Errorf(envs.CodeBadArguments, `step arguments: missing "action"`)
	}
	// A model's answer often carries a newline or capital; the words themselves are strict.
	action := strings.ToLower(strings.TrimSpace(*a.Action))
	if action != ActionHit && action != ActionStick {
		return envs.Outcome{}, envs.Errorf(envs.CodeIllegalAction, "action %q: answer %q or %q", *a.Action, ActionHit, ActionStick)
	}

	handNo := len(s.history) + 1
	reward, ended := s.act(action)
	var b strings.Builder
	if !ended {
		fmt.Fprintf(&b, "You hit and drew %s.\n%s", cardName(s.cur.Player[len(s.cur.Player)-1]), s.describeCurrent())
		return envs.Outcome{Observation: b.String()}, nil
	}
	last := s.history[len(s.history)-1]
	fmt.Fprintf(&b, "Hand %d of %d: %s\n", handNo, s.rounds, describeEnd(action, last))
	out := envs.Outcome{Reward: float64(reward)}
	if s.cur != nil {
		b.WriteString(s.describeCurrent())
	} else {
		fmt.Fprintf(&b, "All %d hands are over: total reward %d.\n%s", s.rounds, s.total(), s.obsLine())
		out.Terminated = true
	}
	out.Observation = b.String()
	return out, nil
}

func (s *session) total() int {
	t := 0
	for _, h := range s.history {
		t += *h.Reward
	}
	return t
}

type handDetail struct {
	Hand      int   `json:"hand"`
	Player    []int `json:"player"`
	Dealer    []int `json:"dealer"`
	PlayerSum int   `json:"player_sum"`
	DealerSum int   `json:"dealer_sum"`
	Reward    int   `json:"reward"`
}

type verdictDetails struct {
	Rounds    int          `json:"rounds"`
	Completed int          `json:"completed"`
	Hands     []handDetail `json:"hands"`
}

// Verify scores the hands played so far: the sum of their rewards.
func (s *session) Verify() (envs.Verdict, error) {
	d := verdictDetails{Rounds: s.rounds, Completed: len(s.history), Hands: make([]handDetail, 0, len(s.history))}
	for i, h := range s.history {
		ps, _ := handValue(h.Player)
		ds, _ := handValue(h.Dealer)
		d.Hands = append(d.Hands, handDetail{Hand: i + 1, Player: h.Player, Dealer: h.Dealer, PlayerSum: ps, DealerSum: ds, Reward: *h.Reward})
	}
	b, err := json.Marshal(d)
	if err != nil {
		return envs.Verdict{}, fmt.Errorf("blackjack verdict details: %w", err)
	}
	return envs.Verdict{Reward: float64(s.total()), Details: b}, nil
}

type exportedRNG struct {
	Algorithm string `json:"algorithm"`
	State     string `json:"state"` // 16 lowercase hex digits
	Draws     uint64 `json:"draws"`
}

type exportedState struct {
	Version int            `json:"version"`
	Seed    int64          `json:"seed"`
	Rounds  int            `json:"rounds"`
	RNG     exportedRNG    `json:"rng"`
	History []finishedHand `json:"history"`
	Current *hand          `json:"current"`
}

func (s *session) exported() exportedState {
	return exportedState{
		Version: stateVersion,
		Seed:    s.shoe.seed,
		Rounds:  s.rounds,
		RNG:     exportedRNG{Algorithm: rngAlgorithm, State: fmt.Sprintf("%016x", s.shoe.state), Draws: s.shoe.draws},
		History: s.history,
		Current: s.cur,
	}
}

// Export returns the seed, the shoe's position, the hand in play and every
// finished hand, as deterministic JSON.
func (s *session) Export() (json.RawMessage, error) {
	b, err := json.Marshal(s.exported())
	if err != nil {
		return nil, fmt.Errorf("blackjack export: %w", err)
	}
	return b, nil
}

// Close has nothing to release.
func (s *session) Close() error { return nil }

// fromExported validates st and rebuilds its session: first the shape of
// each hand (so the messages name the problem), then a replay of the shoe
// that must reproduce st exactly.
func fromExported(st exportedState) (*session, error) {
	if st.Version != stateVersion {
		return nil, fmt.Errorf("version %d, want %d", st.Version, stateVersion)
	}
	if st.Rounds < MinRounds || st.Rounds > MaxRounds {
		return nil, fmt.Errorf("rounds %d outside %d..%d", st.Rounds, MinRounds, MaxRounds)
	}
	if st.History == nil {
		return nil, errors.New(`missing "history"`)
	}
	if len(st.History) > st.Rounds {
		return nil, fmt.Errorf("%d hands finished of %d rounds", len(st.History), st.Rounds)
	}
	if (st.Current == nil) != (len(st.History) == st.Rounds) {
		return nil, fmt.Errorf("current hand present=%t with %d of %d hands finished", st.Current != nil, len(st.History), st.Rounds)
	}
	for i, h := range st.History {
		if h.Reward == nil {
			return nil, fmt.Errorf("hand %d: missing reward", i+1)
		}
		if err := checkHand(h.Player, h.Dealer, true); err != nil {
			return nil, fmt.Errorf("hand %d: %w", i+1, err)
		}
	}
	if st.Current != nil {
		if err := checkHand(st.Current.Player, st.Current.Dealer, false); err != nil {
			return nil, fmt.Errorf("current hand %d: %w", len(st.History)+1, err)
		}
	}
	if err := checkRNG(st); err != nil {
		return nil, err
	}

	// Replay: the actions are implied by the cards (each extra player card
	// is a hit; a finished hand without a bust ended with a stick).
	s := newSession(st.Seed, st.Rounds)
	for i, h := range st.History {
		for len(s.history) == i && len(s.cur.Player) < len(h.Player) {
			s.act(ActionHit)
		}
		if len(s.history) == i {
			s.act(ActionStick)
		}
		if got := s.history[i]; !reflect.DeepEqual(got, h) {
			return nil, fmt.Errorf("hand %d (player %v, dealer %v, reward %d) is not what seed %d deals (player %v, dealer %v, reward %d)",
				i+1, h.Player, h.Dealer, *h.Reward, st.Seed, got.Player, got.Dealer, *got.Reward)
		}
	}
	if c := st.Current; c != nil {
		n := len(s.history)
		for len(s.history) == n && len(s.cur.Player) < len(c.Player) {
			s.act(ActionHit)
		}
		if len(s.history) != n || !reflect.DeepEqual(s.cur, c) {
			return nil, fmt.Errorf("current hand %d (player %v, dealer %v) is not what seed %d deals", n+1, c.Player, c.Dealer, st.Seed)
		}
	}
	if s.shoe.draws != st.RNG.Draws {
		return nil, fmt.Errorf("rng draws %d, but the hands hold %d cards", st.RNG.Draws, s.shoe.draws)
	}
	return s, nil
}

// checkHand refuses card values and sums that no play can produce. A
// finished hand may end in a bust; no hand continues after one.
func checkHand(player, dealer []int, finished bool) error {
	if len(player) < 2 || len(dealer) < 2 {
		return fmt.Errorf("player has %d cards and dealer %d; each is dealt 2", len(player), len(dealer))
	}
	for _, cards := range [][]int{player, dealer} {
		for _, c := range cards {
			if c < 1 || c > 10 {
				return fmt.Errorf("card value %d outside 1..10", c)
			}
		}
	}
	for n := 3; n <= len(player); n++ {
		if isBust(player[:n-1]) || (!finished && isBust(player[:n])) {
			return fmt.Errorf("player cards %v: play continued past a bust", player)
		}
	}
	if !finished && len(dealer) != 2 {
		return fmt.Errorf("dealer drew %d cards before the player stuck", len(dealer)-2)
	}
	if finished && len(dealer) > 2 {
		if isBust(player) {
			return fmt.Errorf("dealer drew after the player busted with %v", player)
		}
		for n := 2; n < len(dealer); n++ {
			if dealerDone(dealer[:n]) {
				return fmt.Errorf("dealer cards %v: drew past 17", dealer)
			}
		}
	}
	if finished && !isBust(player) && !dealerDone(dealer) {
		return fmt.Errorf("dealer cards %v: stopped below 17", dealer)
	}
	return nil
}

func checkRNG(st exportedState) error {
	if st.RNG.Algorithm != rngAlgorithm {
		return fmt.Errorf("rng algorithm %q, want %q", st.RNG.Algorithm, rngAlgorithm)
	}
	if len(st.RNG.State) != 16 || strings.ToLower(st.RNG.State) != st.RNG.State {
		return fmt.Errorf("rng state %q: want 16 lowercase hex digits", st.RNG.State)
	}
	state, err := strconv.ParseUint(st.RNG.State, 16, 64)
	if err != nil {
		return fmt.Errorf("rng state %q: %w", st.RNG.State, err)
	}
	if want := stateAfter(st.Seed, st.RNG.Draws); state != want {
		return fmt.Errorf("rng state %016x is not seed %d's shoe after %d draws (%016x)", state, st.Seed, st.RNG.Draws, want)
	}
	return nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data.
func decodeStrict(data json.RawMessage, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func (s *session) obsLine() string {
	o := Observation{Rounds: s.rounds}
	if len(s.history) > 0 {
		o.LastReward = *s.history[len(s.history)-1].Reward
	}
	h := hand{}
	if s.cur != nil {
		h = *s.cur
		o.Hand = len(s.history) + 1
	} else {
		last := s.history[len(s.history)-1]
		h = hand{Player: last.Player, Dealer: last.Dealer}
		o.Hand = len(s.history)
		o.Done = true
	}
	o.PlayerSum, o.UsableAce = handValue(h.Player)
	o.DealerCard = h.Dealer[0]
	b, _ := json.Marshal(o)
	return ObsPrefix + string(b)
}

// describeCurrent shows the hand in play and asks for an action.
func (s *session) describeCurrent() string {
	return fmt.Sprintf("Hand %d of %d: your cards %s (%s); the dealer shows %s. Hit or stick?\n%s",
		len(s.history)+1, s.rounds, cardList(s.cur.Player), total(s.cur.Player), cardName(s.cur.Dealer[0]), s.obsLine())
}

func describeEnd(action string, h finishedHand) string {
	var who string
	switch *h.Reward {
	case 1:
		who = "you win, +1"
	case -1:
		who = "you lose, -1"
	default:
		who = "a draw, 0"
	}
	if action == ActionHit {
		return fmt.Sprintf("you hit and drew %s: %s (%s), bust; %s.",
			cardName(h.Player[len(h.Player)-1]), cardList(h.Player), total(h.Player), who)
	}
	return fmt.Sprintf("you stick with %s (%s); the dealer has %s (%s); %s.",
		cardList(h.Player), total(h.Player), cardList(h.Dealer), total(h.Dealer), who)
}

func total(cards []int) string {
	v, soft := handValue(cards)
	if soft {
		return fmt.Sprintf("soft %d", v)
	}
	return strconv.Itoa(v)
}

func cardName(c int) string {
	if c == 1 {
		return "A"
	}
	return strconv.Itoa(c)
}

func cardList(cards []int) string {
	names := make([]string, len(cards))
	for i, c := range cards {
		names[i] = cardName(c)
	}
	return strings.Join(names, ", ")
}
