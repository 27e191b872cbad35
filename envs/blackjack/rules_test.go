package blackjack

import "testing"

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
		if got != tt.want || soft != tt.soft {
			t.Errorf("handValue(%v) = %d, %t; want %d, %t", tt.cards, got, soft, tt.want, tt.soft)
		}
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
			if got := compare(tt.player, tt.dealer); got != tt.want {
				t.Errorf("compare(%v, %v) = %d, want %d", tt.player, tt.dealer, got, tt.want)
			}
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
			if (err == nil) != tt.ok {
				t.Errorf("checkHand(%v, %v, %t) = %v, want ok=%t", tt.player, tt.dealer, tt.finished, err, tt.ok)
			}
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
		if d := counts[c] - want; d < -want/20 || d > want/20 {
			t.Errorf("card %d drawn %d times, want about %d", c, counts[c], want)
		}
	}
	if s.draws != n || s.state != stateAfter(7, n) {
		t.Errorf("shoe after %d draws: draws %d state %x, want state %x", n, s.draws, s.state, stateAfter(7, n))
	}
}
