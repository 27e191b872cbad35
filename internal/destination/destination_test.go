package destination

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func lookupOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func mustConfig(t *testing.T, env map[string]string, d Defaults) Config {
	t.Helper()
	c, err := FromLookup(lookupOf(env), d)
	require.NoError(t, err)
	return c
}

var defaults = Defaults{
	EnvURL: "http://127.0.0.1:8091", ModelURL: "http://127.0.0.1:8092/v1",
	DataToken: "data", ControlToken: "control", APIKey: "key",
}

func TestCanonical(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:8091":      "http://127.0.0.1:8091",
		"http://127.0.0.1:8091/":     "http://127.0.0.1:8091",
		"HTTP://Envs.Internal:80/a/": "http://envs.internal/a",
		"https://h:443/v1":           "https://h/v1",
		"http://[::1]:8091":          "http://[::1]:8091",
	} {
		got, err := Canonical(raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
	}
	for _, raw := range []string{
		"", "ftp://h", "http://", "http://good@evil", "http://127.0.0.1:8091@evil.example",
		"http://h/?q=1", "http://h/#x", "http://h/a/../b", "127.0.0.1:8091", "http://h:*",
	} {
		_, err := Canonical(raw)
		require.Error(t, err, raw)
	}
}

func TestPrefixMatch(t *testing.T) {
	match := func(prefix, raw string) bool {
		p, err := ParsePrefix(prefix)
		require.NoError(t, err, prefix)
		u, err := parse(raw)
		require.NoError(t, err, raw)
		return p.Match(u)
	}
	require.True(t, match("http://127.0.0.1:*", "http://127.0.0.1:9999"))
	require.True(t, match("http://127.0.0.1:*", "http://127.0.0.1"))
	require.False(t, match("http://127.0.0.1:*", "http://127.0.0.10:9999"), "a host is matched whole")
	require.False(t, match("http://127.0.0.1:*", "https://127.0.0.1:9999"), "the scheme is matched")
	require.False(t, match("http://good.example", "http://good.example.attacker.com"))
	require.False(t, match("http://good.example", "http://good.example:8080"), "no port means the default port")
	require.True(t, match("https://api.example/v1", "https://api.example/v1"))
	require.True(t, match("https://api.example/v1", "https://api.example/v1/models"))
	require.False(t, match("https://api.example/v1", "https://api.example/v10"), "a path is matched by whole elements")
	require.False(t, match("https://api.example/v1", "https://api.example/"))
	for _, bad := range []string{"127.0.0.1", "http://h:*:*", "http://u@h", "http://h?x=1"} {
		_, err := ParsePrefix(bad)
		require.Error(t, err, bad)
	}
}

func TestEnvResolution(t *testing.T) {
	c := mustConfig(t, map[string]string{
		EnvEnvServers:            "a=http://10.0.0.5:8091, b=https://envs.internal",
		"TURNSTILE_DATA_TOKEN_A": "data-a", "TURNSTILE_CONTROL_TOKEN_A": "control-a",
		EnvAllowedEnvURLs:      "http://10.0.1.0:8091",
		EnvAllowedParticipants: "http://10.0.2.0:*",
	}, defaults)

	got, err := c.Env("", "")
	require.NoError(t, err)
	require.Equal(t, Target{Name: DefaultName, URL: "http://127.0.0.1:8091", Secret: "data"}, got, "neither: the default")
	got, err = c.Env("a", "")
	require.NoError(t, err)
	require.Equal(t, Target{Name: "a", URL: "http://10.0.0.5:8091", Secret: "data-a"}, got, "a server's own token")
	got, err = c.Env("", "http://10.0.0.5:8091/")
	require.NoError(t, err)
	require.Equal(t, Target{Name: "a", URL: "http://10.0.0.5:8091", Secret: "data-a"}, got, "a configured server's URL gets its token")
	got, err = c.Env("b", "")
	require.NoError(t, err)
	require.Equal(t, "data", got.Secret, "a server without its own token gets the global one")
	got, err = c.Env("", "http://10.0.1.0:8091")
	require.NoError(t, err)
	require.Equal(t, Target{URL: "http://10.0.1.0:8091", Secret: "data"}, got, "an allowlisted URL")
	got, err = c.Env("", "http://10.0.2.0:7000")
	require.NoError(t, err, "a participant is admitted as an environment server too")
	require.Equal(t, "data", got.Secret)

	for _, bad := range []struct{ name, url, setting string }{
		{"", "http://attacker.example", EnvAllowedEnvURLs},
		{"", "http://10.0.0.5:8092", EnvAllowedEnvURLs},
		{"", "http://10.0.0.5:8091@attacker.example", EnvAllowedEnvURLs},
		{"nope", "", EnvEnvServers},
		{"a", "http://10.0.0.5:8091", "not both"},
	} {
		_, err := c.Env(bad.name, bad.url)
		require.Error(t, err, "%+v", bad)
		require.True(t, IsRefused(err))
		require.Contains(t, err.Error(), bad.setting, "%+v", bad)
		require.NotContains(t, err.Error(), "data-a", "a refusal names no secret")
	}

	// The control plane: named servers and the participants' allowlist only.
	got, err = c.Participant("http://10.0.0.5:8091")
	require.NoError(t, err)
	require.Equal(t, Target{Name: "a", URL: "http://10.0.0.5:8091", Secret: "control-a"}, got)
	got, err = c.EnvControl("b", "")
	require.NoError(t, err)
	require.Equal(t, "control", got.Secret)
	got, err = c.Participant("http://10.0.2.0:1234")
	require.NoError(t, err)
	require.Equal(t, "control", got.Secret)
	_, err = c.Participant("http://10.0.1.0:8091")
	require.ErrorContains(t, err, EnvAllowedParticipants, "the env allowlist does not admit the control token")
	require.ErrorContains(t, c.CheckParticipants([]string{"http://127.0.0.1:8091", "http://attacker.example"}), "http://attacker.example")
	require.NoError(t, c.CheckParticipants([]string{"http://127.0.0.1:8091", "http://10.0.2.0:1"}))
	_, err = c.Participant("")
	require.Error(t, err, "a participant is named by its URL, never the default by omission")
}

func TestNothingConfiguredAdmitsNothing(t *testing.T) {
	var c Config
	_, err := c.Env("", "")
	require.ErrorContains(t, err, EnvEnvURL)
	_, err = c.Env("", "http://127.0.0.1:8091")
	require.Error(t, err)
	_, err = c.Model("", "")
	require.ErrorContains(t, err, EnvModelBaseURL)
	_, err = c.Participant("http://127.0.0.1:8091")
	require.Error(t, err)
	require.Error(t, c.Store("s3://b/p?region=us-east-1"))
	require.NoError(t, c.Store("/var/lib/turnstile"), "a directory is no destination")
	require.NoError(t, c.Store("file:///var/lib/turnstile"))
}

func TestModelResolution(t *testing.T) {
	c := mustConfig(t, map[string]string{
		EnvModelEndpoints:                 "vllm=http://gpu-0:8000/v1",
		"TURNSTILE_MODEL_API_KEY_VLLM":    "key-vllm",
		EnvAllowedModelURLs:               "https://api.example/v1",
		"TURNSTILE_MODEL_API_KEY_DEFAULT": "key-default",
	}, defaults)
	got, err := c.Model("", "")
	require.NoError(t, err)
	require.Equal(t, Target{Name: DefaultName, URL: "http://127.0.0.1:8092/v1", Secret: "key-default"}, got)
	got, err = c.Model("vllm", "")
	require.NoError(t, err)
	require.Equal(t, Target{Name: "vllm", URL: "http://gpu-0:8000/v1", Secret: "key-vllm"}, got)
	got, err = c.Model("", "https://api.example/v1")
	require.NoError(t, err)
	require.Equal(t, Target{URL: "https://api.example/v1", Secret: "key"}, got)
	_, err = c.Model("", "http://attacker.example/v1")
	require.ErrorContains(t, err, EnvAllowedModelURLs)
	_, err = c.Model("", "http://127.0.0.1:8092/v2")
	require.ErrorContains(t, err, EnvAllowedModelURLs, "another path of a configured host is not configured")
	_, err = c.Model("nope", "")
	require.ErrorContains(t, err, EnvModelEndpoints)
}

func TestStoreEndpoints(t *testing.T) {
	c := mustConfig(t, map[string]string{EnvAllowedStoreEndpoints: "https://minio.internal:9000"},
		Defaults{StoreLocations: []string{"s3://t/p?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true"}})
	require.NoError(t, c.Store("s3://ck/x?endpoint=http://127.0.0.1:7070&region=us-east-1"), "the transcript store's endpoint")
	require.NoError(t, c.Store("s3://ck/x?endpoint=https://minio.internal:9000&region=us-east-1"))
	err := c.Store("s3://ck/x?endpoint=http://attacker.example&region=us-east-1")
	require.ErrorContains(t, err, EnvAllowedStoreEndpoints)
	require.ErrorContains(t, c.Store("s3://ck/x?endpoint=http://attacker.example&endpoint=http://127.0.0.1:7070"), "attacker",
		"the first endpoint= is the one the driver uses")
	require.ErrorContains(t, c.Store("s3://ck/x?region=us-east-1"), AWS, "AWS's own endpoints are not admitted unless configured")
	require.ErrorContains(t, c.Store("s3://ck/x?endpoint=127.0.0.1:7070"), EnvAllowedStoreEndpoints, "an endpoint without a scheme")

	aws := mustConfig(t, map[string]string{}, Defaults{StoreLocations: []string{"s3://t/p?region=eu-west-1"}})
	require.NoError(t, aws.Store("s3://ck/x?region=eu-west-1"), "the transcript store is on AWS")
	require.Error(t, aws.Store("s3://ck/x?endpoint=http://127.0.0.1:7070"))
	explicit := mustConfig(t, map[string]string{EnvAllowedStoreEndpoints: "aws"}, Defaults{})
	require.NoError(t, explicit.Store("s3://ck/x?region=eu-west-1"))
}

func TestFromLookupRefusesBadSettings(t *testing.T) {
	for env, want := range map[string]map[string]string{
		EnvEnvServers:            {EnvEnvServers: "a"},
		EnvEnvServers + " twice": {EnvEnvServers: "a=http://h,a=http://i"},
		EnvEnvServers + " name":  {EnvEnvServers: "A=http://h"},
		EnvEnvServers + " dflt":  {EnvEnvServers: "default=http://h"},
		EnvEnvServers + " url":   {EnvEnvServers: "a=ftp://h"},
		EnvModelEndpoints:        {EnvModelEndpoints: "v=http://u@h"},
		EnvAllowedEnvURLs:        {EnvAllowedEnvURLs: "127.0.0.1"},
		EnvAllowedParticipants:   {EnvAllowedParticipants: "http://h?x"},
		EnvAllowedStoreEndpoints: {EnvAllowedStoreEndpoints: "minio:9000"},
		"TURNSTILE_DATA_TOKEN_A": {EnvEnvServers: "a=http://h", "TURNSTILE_DATA_TOKEN_A": "same", "TURNSTILE_CONTROL_TOKEN_A": "same"},
	} {
		_, err := FromLookup(lookupOf(want), defaults)
		require.Error(t, err, env)
		name, _, _ := strings.Cut(env, " ")
		require.Contains(t, err.Error(), name, "the error names the variable at fault")
	}
}

func TestSecretVar(t *testing.T) {
	require.Equal(t, "TURNSTILE_DATA_TOKEN_ENV_A", SecretVar(DataTokenPrefix, "env-a"))
}

// BenchmarkResolve is what an activity pays per call to resolve its
// destination, by name and by URL; BenchmarkResolve/baseline is one
// url.Parse of the same URL in the same run, the cost any HTTP client pays
// anyway: read the others as ratios to it.
func BenchmarkResolve(b *testing.B) {
	c, err := FromLookup(lookupOf(map[string]string{
		EnvEnvServers: "a=http://10.0.0.5:8091,b=http://10.0.0.6:8091,c=http://10.0.0.7:8091", EnvAllowedParticipants: "http://10.0.1.0:*",
	}), defaults)
	require.NoError(b, err)
	for _, bc := range []struct {
		name string
		fn   func() error
	}{
		{"baseline", func() error { _, err := url.Parse("http://10.0.1.0:7000"); return err }},
		{"by name", func() error { _, err := c.Env("c", ""); return err }},
		{"by configured URL", func() error { _, err := c.Env("", "http://10.0.0.7:8091"); return err }},
		{"by allowlisted URL", func() error { _, err := c.Env("", "http://10.0.1.0:7000"); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := bc.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
