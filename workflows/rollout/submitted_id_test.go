package rollout_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestSubmittedIndex(t *testing.T) {
	for _, tc := range []struct {
		id   string
		i    int
		isOf bool
	}{
		{"s1-0007", 7, true},
		{"s1-12345", 12345, true},
		{"s1-7", 0, false},     // not zero-padded: not a submission id
		{"s1-00007", 0, false}, // over-padded
		{"s2-0007", 0, false},  // another set
		{"s1-x007", 0, false},
		{"s1--007", 0, false},
		{"s1-0007-r1", 0, false}, // a dataset id
	} {
		i, ok := rollout.SubmittedIndex("s1", tc.id)
		require.Equal(t, tc.isOf, ok, "SubmittedIndex(s1, %q) = %d, %v; want %d, %v", tc.id, i, ok, tc.i, tc.isOf)
		require.Equal(t, tc.i, i, "SubmittedIndex(s1, %q) = %d, %v; want %d, %v", tc.id, i, ok, tc.i, tc.isOf)
		if ok {
			assert.Equal(t, tc.id, rollout.SubmittedID("s1", i), "SubmittedID(s1, %d)", i)
		}
	}
}
