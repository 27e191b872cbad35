package blackjack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHandValue(t *testing.T) {
	tests := []struct {
		cards []int
		want  int
		soft  bool
	}{
		{[]int{10, 7}, 17, false},
		{[]int{1, 6}, 17, true},
		{[]int{1, 6, 10}, 17, false},
		{[]int{1, 1}, 12, true},
		{[]int{1, 10}, 21, true},
		{[]int{1, 1, 9}, 21, true},
		{[]int{10, 10, 5}, 25, false},
		{[]int{1, 5, 5, 10}, 21, false},
	}
	for _, tt := range tests {
		got, soft := handValue(tt.cards)
		require.Equal(t, tt.want, got, "handValue(%v) = %d, %t; want %d, %t", tt.cards, got, soft, tt.want, tt.soft)
		require.Equal(t, tt.soft, soft, "handValue(%v) = %d, %t; want %d, %t", tt.cards, got, soft, tt.want, tt.soft)
	}
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name           string
		player, dealer []int
		want           int
	}{
		{"higher wins", []int{10, 9}, []int{10, 8}, 1},
		{"lower loses", []int{10, 7}, []int{10, 8}, -1},
		{"equal draws", []int{10, 8}, []int{9, 9}, 0},
		{"dealer bust loses", []int{10, 2}, []int{10, 6, 10}, 1},
		{"natural is a plain 21 (natural off)", []int{1, 10}, []int{7, 4, 10}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := compare(tt.player, tt.dealer)
			assert.Equal(t, tt.want, got, "compare(%v, %v) = %d, want %d", tt.player, tt.dealer, got, tt.want)
		})
	}
}

func TestCheckHand(t *testing.T) {
	tests := []struct {
		name           string
		player, dealer []int
		finished       bool
		ok             bool
	}{
		{"dealt", []int{2, 3}, []int{4, 5}, false, true},
		{"one card", []int{2}, []int{4, 5}, false, false},
		{"card 11", []int{11, 3}, []int{4, 5}, false, false},
		{"card 0", []int{0, 3}, []int{4, 5}, false, false},
		{"current hand bust", []int{10, 6, 10}, []int{4, 5}, false, false},
		{"hit after bust", []int{10, 6, 10, 2}, []int{4, 5}, true, false},
		{"finished bust", []int{10, 6, 10}, []int{4, 5}, true, true},
		{"dealer drew before stick", []int{2, 3}, []int{4, 5, 6}, false, false},
		{"dealer drew after player bust", []int{10, 6, 10}, []int{4, 5, 6}, true, false},
		{"dealer stopped below 17", []int{10, 8}, []int{10, 6}, true, false},
		{"dealer drew past 17", []int{10, 8}, []int{10, 7, 2}, true, false},
		{"dealer stands on soft 17", []int{10, 8}, []int{1, 6}, true, true},
		{"dealer drew to 17", []int{10, 8}, []int{10, 2, 5}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkHand(tt.player, tt.dealer, tt.finished)
			assert.Equal(t, tt.ok, err == nil, "checkHand(%v, %v, %t) = %v, want ok=%t", tt.player, tt.dealer, tt.finished, err, tt.ok)
		})
	}
}

// The shoe's card frequencies follow the deck: four ten-valued cards in 13.
func TestShoeDistribution(t *testing.T) {
	s := newShoe(7)
	counts := map[int]int{}
	const n = 130000
	for range n {
		counts[s.draw()]++
	}
	for c := 1; c <= 10; c++ {
		want := n / 13
		if c == 10 {
			want = 4 * n / 13
		}
		d := counts[c] - want
		require.GreaterOrEqual(t, d, -want/20, "card %d drawn %d times, want about %d", c, counts[c], want)
		require.LessOrEqual(t, d, want/20, "card %d drawn %d times, want about %d", c, counts[c], want)
	}
	require.Equal(t, uint64(n), s.draws, "shoe after %d draws: draws %d state %x, want state %x", n, s.draws, s.state, stateAfter(7, n))
	require.Equal(t, stateAfter(7, n), s.state, "shoe after %d draws: draws %d state %x, want state %x", n, s.draws, s.state, stateAfter(7, n))
}
