package trainer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestScheduleInput(t *testing.T) {
	ok := ScheduleRequest{Set: "s1", Root: "ckpt", Participants: []string{"http://127.0.0.1:8091"},
		Every: time.Minute, Timeout: 30 * time.Second, Tag: "step-3", Keep: 2}
	in, err := ok.scheduleInput("/work")
	require.NoError(t, err)
	require.True(t, in.Scheduled)
	require.Empty(t, in.CheckpointID, "each fire takes its id from its workflow ID")
	require.Equal(t, "/work/ckpt", in.Root)
	require.Equal(t, "step-3", in.Tag)
	require.Equal(t, 2, in.Keep)
	require.Equal(t, "30s", in.Timeout)

	for _, tc := range []struct {
		name string
		edit func(*ScheduleRequest)
		want string
	}{
		{"no interval", func(r *ScheduleRequest) { r.Every = 0 }, "--every 0s"},
		{"bad set", func(r *ScheduleRequest) { r.Set = "a b" }, "set"},
		{"bad tag", func(r *ScheduleRequest) { r.Tag = "step 3" }, "--tag"},
		{"negative keep", func(r *ScheduleRequest) { r.Keep = -1 }, "--keep -1"},
		{"no root", func(r *ScheduleRequest) { r.Root = "" }, "--root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			_, err := r.scheduleInput("/work")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestGCRequestValidate(t *testing.T) {
	require.NoError(t, GCRequest{Roots: []string{"/ckpt"}, Set: "s1", Keep: 2}.validate())
	require.NoError(t, GCRequest{Transcripts: "/tr"}.validate())
	for _, tc := range []struct {
		r    GCRequest
		want string
	}{
		{GCRequest{}, "give --root"},
		{GCRequest{Roots: []string{"/ckpt"}, Keep: 2}, "--keep needs the set"},
		{GCRequest{Roots: []string{"/ckpt"}, Keep: -1}, "--keep -1"},
		{GCRequest{Roots: []string{"ckpt"}}, "absolute"},
		{GCRequest{Transcripts: "/tr", Grace: -time.Second}, "--grace"},
	} {
		require.ErrorContains(t, tc.r.validate(), tc.want)
	}
}
