package rollout

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/temporal"
)

// TestStartOptionsGroup: a dataset rollout carries its group and repeat as
// search attributes; any other rollout sets neither, so it starts on a
// server that has not registered them.
func TestStartOptionsGroup(t *testing.T) {
	groupKey := temporal.NewSearchAttributeKeyKeyword(SARolloutGroup)
	repeatKey := temporal.NewSearchAttributeKeyInt64(SARolloutRepeat)

	in := Input{RolloutID: "s1-q7-r2", Set: "s1", Group: "q7", Repeat: 2, Env: EnvRef{Name: "counter"}}
	sa := StartOptions(in, TaskQueue).TypedSearchAttributes
	g, ok := sa.GetKeyword(groupKey)
	assert.True(t, ok, "%s unset", SARolloutGroup)
	assert.Equal(t, "q7", g, SARolloutGroup)
	r, ok := sa.GetInt64(repeatKey)
	assert.True(t, ok, "%s unset", SARolloutRepeat)
	assert.Equal(t, int64(2), r, SARolloutRepeat)

	plain := StartOptions(Input{RolloutID: "s1-0001", Set: "s1"}, TaskQueue).TypedSearchAttributes
	_, ok = plain.GetKeyword(groupKey)
	assert.False(t, ok, "a rollout without a group sets %s", SARolloutGroup)
	_, ok = plain.GetInt64(repeatKey)
	assert.False(t, ok, "a rollout without a group sets %s", SARolloutRepeat)
}
