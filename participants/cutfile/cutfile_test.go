package cutfile_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/participants/cutfile"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

var vector = filepath.Join("..", "..", "docs", "protocol", "testdata", "envserver-v1", "checkpoint")

// TestReadTheVector: the coordinator's reading of the environment server's
// test vector of ARTIFACT.md.
func TestReadTheVector(t *testing.T) {
	cp, err := artifact.Open(context.Background(), vector, "demo-k1")
	require.NoError(t, err)
	cut, err := cutfile.Read(context.Background(), cp)
	require.NoError(t, err)
	require.Equal(t, cutfile.Cut{
		Digest:   "d58248a517f6aac1affb69c7dc02c1d6f8c042b372eacad9c21198773fe2b08c",
		Sessions: []cutfile.Session{{RolloutID: "demo-0000"}, {RolloutID: "demo-0001", Retired: true}},
		Fences:   map[string]int{"demo-0000": 0, "demo-0001": 0, "demo-0002": 2},
	}, cut)
	require.True(t, cut.Holds("demo-0001"))
	require.False(t, cut.Holds("demo-0002"), "a fence is not a session")
}

// TestReadRefusesRecords: each record the coordinator cannot read is named.
func TestReadRefusesRecords(t *testing.T) {
	session := func(key, data string) []artifact.Section {
		return []artifact.Section{
			{Name: protocol.SectionSessions, Records: []artifact.Record{{Key: key, Data: []byte(data)}}},
			{Name: protocol.SectionFences, Records: []artifact.Record{}},
		}
	}
	for _, tc := range []struct {
		name     string
		sections []artifact.Section
		want     string
	}{
		{"no fences section", []artifact.Section{{Name: protocol.SectionSessions, Records: []artifact.Record{}}}, "section fences"},
		{"no sessions section", []artifact.Section{{Name: protocol.SectionFences, Records: []artifact.Record{}}}, "section sessions"},
		{"not an object", session("a", `[1]`), "not a JSON object"},
		{"another rollout", session("a", `{"rollout_id":"b","attempt":0,"retired":false}`), "not its key"},
		{"no attempt", session("a", `{"rollout_id":"a","retired":false}`), "no field attempt"},
		{"attempt 1.0", session("a", `{"rollout_id":"a","attempt":1.0,"retired":false}`), "not an integer"},
		{"negative attempt", session("a", `{"rollout_id":"a","attempt":-1,"retired":false}`), "not an integer ≥ 0"},
		{"no retired", session("a", `{"rollout_id":"a","attempt":0}`), "no field retired"},
		{"retired as a string", session("a", `{"rollout_id":"a","attempt":0,"retired":"no"}`), "not a boolean"},
		{"a fence of another rollout", []artifact.Section{
			{Name: protocol.SectionSessions, Records: []artifact.Record{}},
			{Name: protocol.SectionFences, Records: []artifact.Record{{Key: "a", Data: []byte(`{"rollout_id":"b","fence":1}`)}}},
		}, "section fences: record \"a\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "c")
			_, err := artifact.Write(context.Background(), dir, artifact.Meta{CheckpointID: "c"}, tc.sections, artifact.Options{})
			require.NoError(t, err)
			cp, err := artifact.Open(context.Background(), dir, "c")
			require.NoError(t, err)
			_, err = cutfile.Read(context.Background(), cp)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// Fields of the participant's own are not read.
	dir := filepath.Join(t.TempDir(), "c")
	_, err := artifact.Write(context.Background(), dir, artifact.Meta{CheckpointID: "c"},
		session("a", `{"rollout_id":"a","attempt":2,"retired":false,"state":{"x":1},"mine":true}`), artifact.Options{})
	require.NoError(t, err)
	cp, err := artifact.Open(context.Background(), dir, "c")
	require.NoError(t, err)
	cut, err := cutfile.Read(context.Background(), cp)
	require.NoError(t, err)
	require.Equal(t, []cutfile.Session{{RolloutID: "a", Attempt: 2}}, cut.Sessions)
}
