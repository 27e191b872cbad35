package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// routeTarget is a concrete target of a route's pattern.
func routeTarget(rt route) string {
	return strings.NewReplacer("{set}", "s1", "{id}", "k1").Replace(rt.pattern)
}

// TestRoles: the trainer token opens the trainer routes and is answered
// 403 forbidden, naming the role needed, on the operator routes; the
// operator token opens every route; no token or a wrong one is 401 as
// before. A refused request reaches no backend call.
func TestRoles(t *testing.T) {
	f := &fakeBackend{runs: 1}
	s := newTestServer(t, f)
	for _, rt := range s.routes() {
		if rt.open {
			continue
		}
		target := routeTarget(rt)
		for _, token := range []string{"", "wrong-token", testToken + "x"} {
			rec := callAs(t, s, token, rt.method, target, "{}")
			require.Equal(t, http.StatusUnauthorized, rec.Code, "%s %s with token %q", rt.method, target, token)
		}
		rec := callAs(t, s, testToken, rt.method, target, "{}")
		if rt.role == RoleOperator {
			b := expectError(t, rec, http.StatusForbidden, CodeForbidden, "")
			require.Contains(t, b.Error.Message, "operator", "%s %s", rt.method, target)
		} else {
			require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, rec.Code, "%s %s: %s", rt.method, target, rec.Body)
		}
		rec = callAs(t, s, testOperatorToken, rt.method, target, "{}")
		require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, rec.Code, "%s %s with the operator token: %s", rt.method, target, rec.Body)
	}
	for _, m := range mutations {
		require.Zero(t, f.count(m), "%s reached the backend", m)
	}

	// Without an operator token no one may use the operator routes.
	noOperator := newTestServer(t, &fakeBackend{}, func(c *Config) { c.OperatorToken = "" })
	expectError(t, callAs(t, noOperator, testToken, "POST", "/v1/checkpoints", "{}"), http.StatusForbidden, CodeForbidden, "")
	expectError(t, callAs(t, noOperator, testOperatorToken, "POST", "/v1/checkpoints", "{}"), http.StatusUnauthorized, CodeUnauthorized, "")

	_, err := New(Config{Token: "same", OperatorToken: "same"}, &fakeBackend{})
	require.ErrorContains(t, err, "equals the trainer token")
	_, err = New(Config{Token: "t", OperatorToken: " o"}, &fakeBackend{})
	require.ErrorContains(t, err, "whitespace")
}

// TestSubmitDestinations: a submission may name a configured environment
// server or model endpoint, by name or by its URL; any other is a 400
// naming the setting that would admit it, and nothing is started.
func TestSubmitDestinations(t *testing.T) {
	var got trainer.SubmitRequest
	f := &fakeBackend{submit: func(r trainer.SubmitRequest) (trainer.SubmitResult, error) {
		got = r
		return trainer.SubmitResult{Inputs: make([]rollout.Input, r.Count)}, nil
	}}
	s := newTestServer(t, f)
	const base = `"request_id":"r","set":"s","envs":["counter"],"count":1`
	for _, ok := range []struct{ extra, server, url, endpoint, model string }{
		{extra: `,"env_server":"b"`, server: "b"},
		{extra: `,"env_url":"http://127.0.0.1:8091"`, url: "http://127.0.0.1:8091"},
		{extra: `,"env_url":"http://h:7"`, url: "http://h:7"},
		{extra: `,"policy_endpoint":"vllm"`, endpoint: "vllm"},
		{extra: `,"model_url":"http://127.0.0.1:8092/v1/"`, model: "http://127.0.0.1:8092/v1/"},
	} {
		decodeOK[SubmitResponse](t, call(t, s, "POST", "/v1/sets", "{"+base+ok.extra+"}"), http.StatusOK)
		require.Equal(t, []string{ok.server, ok.url, ok.endpoint, ok.model}, []string{got.EnvServer, got.EnvURL, got.PolicyEndpoint, got.ModelURL}, ok.extra)
	}
	submitted := f.count("Submit")
	for _, bad := range []struct{ extra, field, setting string }{
		{`,"env_url":"http://attacker.example"`, "env_url", destination.EnvAllowedEnvURLs},
		{`,"env_url":"http://127.0.0.1:8091@attacker.example"`, "env_url", destination.EnvAllowedEnvURLs},
		{`,"env_server":"nope"`, "env_server", destination.EnvEnvServers},
		{`,"env_server":"Bad Name"`, "env_server", "lower-case letter"},
		{`,"env_server":"b","env_url":"http://b.internal:8091"`, "env_server", "not both"},
		{`,"model_url":"http://attacker.example/v1"`, "model_url", destination.EnvAllowedModelURLs},
		{`,"model_url":"http://127.0.0.1:8092/v2"`, "model_url", destination.EnvAllowedModelURLs},
		{`,"policy_endpoint":"nope"`, "policy_endpoint", destination.EnvModelEndpoints},
	} {
		b := expectError(t, call(t, s, "POST", "/v1/sets", "{"+base+bad.extra+"}"), http.StatusBadRequest, CodeBadRequest, bad.field)
		require.Contains(t, b.Error.Message, bad.setting, bad.extra)
	}
	rows := `"request_id":"r","set":"s","rows":[{"env":"counter","task":{"target":1}},{"env":"counter","task":{"target":1},"policy":{"model":"m","base_url":"http://attacker.example/v1"}}]`
	b := expectError(t, call(t, s, "POST", "/v1/sets", "{"+rows+"}"), http.StatusBadRequest, CodeBadRequest, "rows[1].policy")
	require.Contains(t, b.Error.Message, destination.EnvAllowedModelURLs)
	require.Equal(t, submitted, f.count("Submit"), "a refused submission started nothing")
}

// TestParticipantDestinations: checkpoints, restores and resumes name only
// configured participants; a resume sends each its own control token.
func TestParticipantDestinations(t *testing.T) {
	var got trainer.ResumeRequest
	f := &fakeBackend{resume: func(r trainer.ResumeRequest) (trainer.ResumeSummary, error) {
		got = r
		return trainer.ResumeSummary{}, nil
	}}
	s := newTestServer(t, f)
	for path, body := range map[string]string{
		"/v1/checkpoints": `{"request_id":"c","checkpoint_id":"k1","set":"s1","participants":["http://127.0.0.1:8091","%s"],"timeout":"60s"}`,
		"/v1/restores":    `{"request_id":"r","checkpoint_id":"k1","participants":["%s"]}`,
		"/v1/resumes":     `{"request_id":"r","set":"s1","checkpoint_id":"k1","participants":["%s"]}`,
	} {
		for _, evil := range []string{"http://attacker.example", "http://h.attacker.example:1", "https://h:1"} {
			b := expectError(t, call(t, s, "POST", path, fmt.Sprintf(body, evil)), http.StatusBadRequest, CodeBadRequest, "participants")
			require.Contains(t, b.Error.Message, destination.EnvAllowedParticipants, "%s %s", path, evil)
		}
	}
	for _, m := range mutations {
		require.Zero(t, f.count(m), "%s reached the backend", m)
	}
	decodeOK[ResumeResponse](t, call(t, s, "POST", "/v1/resumes", `{"request_id":"r","set":"s1","checkpoint_id":"k1","participants":["http://b.internal:8091","http://h:1"]}`), http.StatusOK)
	require.NotNil(t, got.TokenFor)
	for url, want := range map[string]string{"http://b.internal:8091": "ctl-b", "http://h:1": "ctl", "http://127.0.0.1:8091": "ctl"} {
		tok, err := got.TokenFor(url)
		require.NoError(t, err)
		require.Equal(t, want, tok, "the control token of %s", url)
	}
	_, err := got.TokenFor("http://attacker.example")
	require.Error(t, err)
}

// datasetServer is a server whose dataset root holds good.jsonl, and a
// secret file beside the root.
func datasetServer(t testing.TB, f *fakeBackend, tweak ...func(*Config)) (s *Server, root, secret string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "datasets")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	require.NoError(t, writeFile(filepath.Join(root, "sub", "good.jsonl"), `{"id":"q1","env":"counter","task":{"target":2}}`+"\n"))
	secret = filepath.Join(dir, "shadow")
	require.NoError(t, writeFile(secret, "root:$6$SECRET$HASH:19000:0:99999:7:::\n{\"SECRET_NAME\":1}\n"))
	return newTestServer(t, f, append([]func(*Config){func(c *Config) { c.DatasetRoot = root }}, tweak...)...), root, secret
}

func submitDataset(t *testing.T, s *Server, path string) *ErrorBody {
	t.Helper()
	rec := call(t, s, "POST", "/v1/sets", fmt.Sprintf(`{"request_id":"d","set":"d","dataset_path":%q}`, path))
	if rec.Code == http.StatusOK {
		return nil
	}
	require.NotContains(t, rec.Body.String(), "SECRET", "file content echoed")
	require.NotContains(t, rec.Body.String(), "root:")
	b := expectError(t, rec, http.StatusBadRequest, CodeBadRequest, "dataset_path")
	return &b
}

// TestDatasetRoot: dataset_path resolves inside the dataset root only; a
// path outside it is refused without being looked at (an existing and a
// missing file alike); a link out of the root, a directory, a FIFO or a
// device is refused promptly; the size is capped.
func TestDatasetRoot(t *testing.T) {
	f := &fakeBackend{}
	s, root, secret := datasetServer(t, f)
	require.Nil(t, submitDataset(t, s, "sub/good.jsonl"), "relative to the root")
	require.Nil(t, submitDataset(t, s, filepath.Join(root, "sub", "good.jsonl")), "absolute inside the root")
	require.Nil(t, submitDataset(t, s, "sub/../sub/good.jsonl"), "cleaned, still inside")
	started := f.count("Submit")

	there, absent := submitDataset(t, s, secret), submitDataset(t, s, secret+"-missing")
	require.Equal(t, strings.ReplaceAll(there.Error.Message, secret, "P"), strings.ReplaceAll(absent.Error.Message, secret+"-missing", "P"),
		"outside the root, an existing and a missing file are refused alike")
	require.Contains(t, there.Error.Message, "dataset root")

	require.NoError(t, os.Symlink(secret, filepath.Join(root, "link.jsonl")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo.jsonl"), 0o644))
	for _, path := range []string{"../shadow", "/dev/urandom", "/etc/passwd", "link.jsonl", "fifo.jsonl", "sub", ".", " ", "missing.jsonl"} {
		require.NotNil(t, submitDataset(t, s, path), "%q", path)
	}
	require.Contains(t, submitDataset(t, s, "fifo.jsonl").Error.Message, "regular file")
	require.Contains(t, submitDataset(t, s, "missing.jsonl").Error.Message, "no such file")
	require.Equal(t, started, f.count("Submit"), "a refused dataset started nothing")

	small, _, _ := datasetServer(t, &fakeBackend{}, func(c *Config) { c.DatasetMaxBytes = 10 })
	require.Contains(t, submitDataset(t, small, "sub/good.jsonl").Error.Message, "--dataset-max-bytes")

	noRoot := newTestServer(t, &fakeBackend{})
	require.Contains(t, submitDataset(t, noRoot, "sub/good.jsonl").Error.Message, "--dataset-root")
}

// TestDatasetRowsNotEchoed: a bad row of a dataset file is reported by its
// line and what was wrong in general terms, never by its content.
func TestDatasetRowsNotEchoed(t *testing.T) {
	s, root, _ := datasetServer(t, &fakeBackend{})
	lines := []string{
		`{"id":"a","env":"counter","task":{"target":1}}`,
		`{"id":"b","env":"counter","task":{"target":1},"SECRET_FIELD":1}`,
		`SECRET-LINE hunter2`,
		`{"id":"c","env":"SECRET_ENV","task":{"target":1}}`,
		`{"id":"a","env":"counter","task":{"target":1}}`,
		`{"id":"SECRET/ID","env":"counter","task":{"target":1}}`,
		`{"id":"d","env":"counter","task":{"target":"SECRET"}}`,
		`{"id":"e","env":"counter","task":{"target":1},"policy":{"model":"m","base_url":"http://SECRET.example/v1"}}`,
		`{"id":"f","env":["SECRET"],"task":{"target":1}}`,
	}
	require.NoError(t, writeFile(filepath.Join(root, "bad.jsonl"), strings.Join(lines, "\n")+"\n"))
	b := submitDataset(t, s, "bad.jsonl")
	require.NotNil(t, b)
	for _, want := range []string{
		"line 2: has a field the row format does not know", "line 3: is not valid JSON", "line 4: field env names no known environment",
		"line 5: field id repeats the id of line 1", "line 6: field id", "line 7: field task is refused", "line 9: field env has the wrong JSON type",
	} {
		require.Contains(t, b.Error.Message, want)
	}
	require.NotContains(t, b.Error.Message, "hunter2")

	// A policy URL the workers do not admit, on a line of a file: by line,
	// without the URL.
	require.NoError(t, writeFile(filepath.Join(root, "policy.jsonl"), lines[0]+"\n"+lines[7]+"\n"))
	b = submitDataset(t, s, "policy.jsonl")
	require.NotNil(t, b)
	require.Contains(t, b.Error.Message, "line 2")
	require.Contains(t, b.Error.Message, destination.EnvAllowedModelURLs)
}

// TestDatasetReadStopsWithTheRequest: a cancelled request stops reading;
// ctxReader ends an endless reader.
func TestDatasetReadStopsWithTheRequest(t *testing.T) {
	s, _, _ := datasetServer(t, &fakeBackend{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.readDataset(ctx, "sub/good.jsonl")
	require.ErrorIs(t, err, context.Canceled)

	ctx, cancel = context.WithCancel(context.Background())
	endless := &endlessRows{cancelAfter: 1000, cancel: cancel}
	_, err = trainer.ReadDataset(ctxReader{ctx: ctx, r: endless})
	require.True(t, errors.Is(err, context.Canceled), "reading stopped with the context: %v", err)
	require.LessOrEqual(t, endless.reads, 1001)
}

// endlessRows is a dataset that never ends; it cancels its context after
// cancelAfter reads.
type endlessRows struct {
	reads, cancelAfter int
	cancel             func()
}

func (e *endlessRows) Read(p []byte) (int, error) {
	e.reads++
	if e.reads == e.cancelAfter {
		e.cancel()
	}
	return copy(p, `{"env":"counter","task":{"target":1}}`+"\n"), nil
}

var _ io.Reader = (*endlessRows)(nil)
