package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// cutAfterWrite runs a streamed call whose stream breaks (as a worker's
// SIGKILL would end it) right after the n-th prefix chunk is written,
// before its heartbeat: the next read of the answer's body fails. No
// heartbeat reaches the activity's environment: it returns the prefixes
// the call tried to heartbeat, in order (the last one is the newest
// durable prefix), and the call's error.
func cutAfterWrite(t *testing.T, acts *model.Activities, in rollout.CallModelInput, n int) ([]rollout.ModelPrefix, error) {
	t.Helper()
	fp, err := failpoint.Parse(fmt.Sprintf("%s=kill@%d", failpoint.WorkerModelPrefixWrittenBeforeHeartbeat, n))
	require.NoError(t, err)
	cut := &atomic.Bool{}
	fp.SetKill(func() { cut.Store(true) })
	acts.Failpoints = fp
	acts.HTTPClient = &http.Client{Transport: cutTransport{cut: cut}}
	var mu sync.Mutex
	var beats []rollout.ModelPrefix
	acts.Heartbeat = func(_ context.Context, details ...any) {
		if p, ok := details[0].(rollout.ModelPrefix); ok {
			mu.Lock()
			beats = append(beats, p)
			mu.Unlock()
		}
	}
	_, err = testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, in)
	mu.Lock()
	defer mu.Unlock()
	return beats, err
}

// cutTransport's answers fail their next read once cut is set.
type cutTransport struct{ cut *atomic.Bool }

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = cutBody{ReadCloser: resp.Body, cut: c.cut}
	}
	return resp, err
}

type cutBody struct {
	io.ReadCloser
	cut *atomic.Bool
}

func (b cutBody) Read(p []byte) (int, error) {
	if b.cut.Load() {
		return 0, errors.New("cut")
	}
	return b.ReadCloser.Read(p)
}

// pacedServer is scriptedServer paced, so that a cut stream has not
// already been read to its end.
func pacedServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(policy.NewServer(policy.ServerConfig{
		Policies: policy.Registry{"scripted-counter": counter.Policy{}}, PolicyVersion: "v1", PadTokens: padTokens, TokensPerSecond: 1000,
	}))
	t.Cleanup(srv.Close)
	return srv
}

// indexFile is the one prefix index in store directory dir.
func indexFile(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "prefix-index", "*"))
	require.NoError(t, err)
	require.Len(t, files, 1, "one call, one prefix index")
	return files[0]
}

// A retry finds the newest prefix written for its call even when the
// heartbeat that named it never got out: with no heartbeat at all (cut
// after the first chunk) and with a heartbeat naming an older chunk. It
// continues from the newest one, so the endpoint generates again only
// what followed it; once the call finished, its index is gone.
func TestRetryContinuesFromIndexedPrefix(t *testing.T) {
	for name, tc := range map[string]struct {
		cutAt int // the chunk after whose write the stream is cut
		beat  int // the prefixes that reached the heartbeat (0: none)
	}{
		"no heartbeat got out":     {cutAt: 1, beat: 0},
		"an older heartbeat named": {cutAt: 3, beat: 2},
	} {
		t.Run(name, func(t *testing.T) {
			base, head, tools := scriptedCounter(t, 3)
			srv := pacedServer(t)
			in := continuingCall(head, tools)
			whole, _ := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, nil)

			received := &atomic.Int64{}
			acts := streamingActs(base, srv.URL+"/v1")
			acts.Received = received
			tried, err := cutAfterWrite(t, acts, in, tc.cutAt)
			require.Error(t, err, "the cut call failed, to be retried")
			// The failed stream's final flush stores what was read after
			// the cut's chunk, if anything.
			require.GreaterOrEqual(t, len(tried), tc.cutAt)
			newest := tried[len(tried)-1]
			require.FileExists(t, indexFile(t, base.Store.Location()))

			retry := streamingActs(base, srv.URL+"/v1")
			var hb *rollout.ModelPrefix
			if tc.beat > 0 {
				hb = &tried[tc.beat-1]
				require.Less(t, hb.Tokens, newest.Tokens)
			}
			res, _ := heartbeats(t, retry, in, hb)
			require.Equal(t, whole.Generation.Record, res.Generation.Record, "the uninterrupted call's tokens and log-probs")
			require.Equal(t, []int{newest.Tokens}, res.Generation.ResumedAt, "continued from the indexed prefix, not the heartbeated one")
			require.Equal(t, newest.Tokens, res.Generation.TokensRecovered)
			st := serverStats(t, srv)
			cutReq, cont := st.Requests[1], st.Requests[len(st.Requests)-1]
			require.Equal(t, newest.Tokens, cont.Start)
			require.Equal(t, int64(newest.Tokens), received.Load(), "every token the cut call read is in the newest prefix")
			require.LessOrEqual(t, received.Load(), int64(cutReq.Generated), "the server sent what the worker read, and maybe more")
			_, err = os.Stat(filepath.Join(base.Store.Location(), "prefix-index"))
			if err == nil {
				files, _ := filepath.Glob(filepath.Join(base.Store.Location(), "prefix-index", "*"))
				require.Empty(t, files, "the finished call removed its index")
			}
		})
	}
}

// An index the retry cannot verify is not followed: one that does not
// decode, names another call or conversation, or names a prefix that does
// not extend the heartbeated one. The retry fails closed to the prefix the
// heartbeat named.
func TestRetryIgnoresCorruptOrForeignIndex(t *testing.T) {
	for name, spoil := range map[string]func(t *testing.T, store *transcriptstore.Store, x transcript.PrefixIndex, other transcript.Digest) []byte{
		"garbage": func(*testing.T, *transcriptstore.Store, transcript.PrefixIndex, transcript.Digest) []byte {
			return []byte(`{"call": 7`)
		},
		"unknown field": func(t *testing.T, _ *transcriptstore.Store, x transcript.PrefixIndex, _ transcript.Digest) []byte {
			return []byte(fmt.Sprintf(`{"call":%q,"head":%q,"record":%q,"tokens":%d,"extra":1}`, x.Call, x.Head, x.Record, x.Tokens))
		},
		"another call": func(t *testing.T, _ *transcriptstore.Store, x transcript.PrefixIndex, _ transcript.Digest) []byte {
			x.Call = `["other-workflow"]`
			return mustJSON(t, x)
		},
		"another conversation": func(t *testing.T, _ *transcriptstore.Store, x transcript.PrefixIndex, other transcript.Digest) []byte {
			x.Head = other
			return mustJSON(t, x)
		},
		"a prefix that does not extend the heartbeat's": func(t *testing.T, store *transcriptstore.Store, x transcript.PrefixIndex, _ transcript.Digest) []byte {
			d, err := store.PutPrefixChunk(t.Context(), transcript.PrefixChunk{
				Head: x.Head, PromptTokenIDs: []int64{1, 2, 3}, TokenIDs: make([]int64, x.Tokens), LogProbs: make([]float64, x.Tokens),
			})
			require.NoError(t, err)
			x.Record = d
			return mustJSON(t, x)
		},
		"more tokens than its prefix holds": func(t *testing.T, _ *transcriptstore.Store, x transcript.PrefixIndex, _ transcript.Digest) []byte {
			x.Tokens++
			return mustJSON(t, x)
		},
	} {
		t.Run(name, func(t *testing.T) {
			base, head, tools := scriptedCounter(t, 3)
			srv := pacedServer(t)
			in := continuingCall(head, tools)
			whole, _ := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, nil)

			tried, err := cutAfterWrite(t, streamingActs(base, srv.URL+"/v1"), in, 3)
			require.Error(t, err)
			hb, newest := tried[1], tried[len(tried)-1]
			file := indexFile(t, base.Store.Location())
			var x transcript.PrefixIndex
			readJSON(t, file, &x)
			require.Equal(t, newest.Record, x.Record, "the index names the newest chunk")
			other := testsupport.MustAppend(t, base.Store, transcript.Item{Role: "user", Content: "another conversation"})
			require.NoError(t, os.WriteFile(file, spoil(t, base.Store, x, other), 0o600))

			res, _ := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, &hb)
			require.Equal(t, whole.Generation.Record, res.Generation.Record)
			require.Equal(t, []int{hb.Tokens}, res.Generation.ResumedAt, "continued from the heartbeated prefix")
			require.False(t, res.Generation.Regenerated)
		})
	}
}

// A retry with neither a heartbeat nor an index starts the call.
func TestRetryWithoutIndexStarts(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	srv := pacedServer(t)
	in := continuingCall(head, tools)
	_, err := cutAfterWrite(t, streamingActs(base, srv.URL+"/v1"), in, 2)
	require.Error(t, err)
	require.NoError(t, os.Remove(indexFile(t, base.Store.Location())))
	res, _ := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, nil)
	require.Empty(t, res.Generation.ResumedAt)
	require.Zero(t, res.Generation.TokensRecovered)
}

// A call that names no tool parser cannot continue a prefix (its
// continuation's text could not be read back into a message). Cut right
// after its first token-count chunk, before any heartbeat got out, its
// retry finds that chunk through the index and starts over, counting the
// chunk's tokens as regenerated; the answer is still the uninterrupted
// one. With the heartbeat throttle (flushes once waited for it) a short
// call had no chunk yet when cut, and regenerated nothing that counted.
func TestRetryWithoutToolParserStartsOverFromIndexedPrefix(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	srv := pacedServer(t)
	in := continuingCall(head, tools)
	in.Policy.ToolParser = ""
	whole, _ := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, nil)
	tried, err := cutAfterWrite(t, streamingActs(base, srv.URL+"/v1"), in, 1)
	require.Error(t, err)
	newest := tried[len(tried)-1]
	require.FileExists(t, indexFile(t, base.Store.Location()))
	res, _ := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, nil)
	require.Equal(t, whole.Generation.Record, res.Generation.Record)
	require.True(t, res.Generation.Regenerated, "no tool parser: the indexed prefix cannot be continued")
	require.Equal(t, newest.Tokens, res.Generation.TokensRegenerated, "the indexed prefix is what was thrown away")
	require.Zero(t, res.Generation.TokensRecovered)
	require.Empty(t, res.Generation.ResumedAt)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

func readJSON(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, v))
}

// Every PrefixTokens tokens a chunk is made durable before the stream is
// read on, however recent the last heartbeat: a flush by token count does
// not wait for the heartbeat throttle (the index names the chunk), so the
// worker never reads on holding PrefixTokens tokens that are not durable.
func TestTokenCountFlushIgnoresHeartbeatThrottle(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	srv := scriptedServer(t, "v1")
	acts := streamingActs(base, srv.URL+"/v1")
	acts.HeartbeatThrottle = time.Hour
	res, beats := heartbeats(t, acts, continuingCall(head, tools), nil)
	n := res.Generation.GenerationTokens
	require.Greater(t, n, padTokens)
	require.Len(t, beats, n/8, "a chunk every 8 tokens")
	for i, b := range beats {
		require.Equal(t, 8*(i+1), b.Tokens, "chunk %d holds exactly 8 tokens", i)
	}
}
