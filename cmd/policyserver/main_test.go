package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/policy"
)

func TestRunServesAndShutsDown(t *testing.T) {
	readyFile := filepath.Join(t.TempDir(), "policy.url")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--ready-file", readyFile, "--imperfection", "0.2"}, io.Discard, func(u string) { ready <- u })
	}()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		require.Failf(t, "run ended before listening", "run returned %v", err)
	}
	content, err := os.ReadFile(readyFile)
	require.NoError(t, err)
	readyURL := strings.TrimSpace(string(content))
	require.Equal(t, base, readyURL, "ready file and callback")
	require.True(t, strings.HasPrefix(readyURL, "http://127.0.0.1:"), "ready file %q, want http://127.0.0.1:PORT/v1", readyURL)
	require.True(t, strings.HasSuffix(readyURL, "/v1"), "ready file %q, want http://127.0.0.1:PORT/v1", readyURL)

	res, err := http.Get(base + "/models")
	require.NoError(t, err)
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	err = json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	var got []string
	for _, m := range list.Data {
		got = append(got, m.ID)
	}
	// The generic scripted policy, and every environment of the catalog
	// under its scripted model name.
	want := []string{policy.ScriptModel}
	for _, env := range catalog.Names() {
		want = append(want, envs.ScriptedModel(env))
	}
	require.NoError(t, err, "models %v (%v), want %v", got, err, want)
	require.Equal(t, strings.Join(want, ","), strings.Join(got, ","), "models %v (%v), want %v", got, err, want)
	// Spelled out: users pass these names and recorded histories hold them.
	for _, model := range []string{"scripted-arithmetic", "scripted-blackjack", "scripted-counter", "scripted-sandbox", "scripted-workplace"} {
		assert.True(t, slices.Contains(got, model), "models %v lack %q", got, model)
	}

	cancel()
	require.NoError(t, <-done, "run after cancel")
	_, err = http.Get(strings.TrimSuffix(base, "/v1") + policy.HealthPath)
	require.Error(t, err, "server still answers after shutdown")
}

func TestParseFlagsRejects(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "error rate above 1", args: []string{"--error-rate", "2"}, wantErr: "error rate"},
		{name: "rates sum above 1", args: []string{"--error-rate", "0.7", "--rate-limit-rate", "0.7"}, wantErr: "exceed 1"},
		{name: "negative latency", args: []string{"--latency", "-1s"}, wantErr: "latency"},
		{name: "imperfection above 1", args: []string{"--imperfection", "1.1"}, wantErr: "imperfection"},
		{name: "bad duration", args: []string{"--jitter", "soon"}, wantErr: "jitter"},
		{name: "negative pace", args: []string{"--tokens-per-second", "-5"}, wantErr: "tokens per second"},
		{name: "negative padding", args: []string{"--pad-tokens", "-1"}, wantErr: "pad tokens"},
		{name: "stray argument", args: []string{"serve"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(tt.args, io.Discard)
			require.ErrorContains(t, err, tt.wantErr, "parseFlags(%q) = %v, want an error containing %q", tt.args, err, tt.wantErr)
		})
	}
}

func TestListenDefaultFromEnvironment(t *testing.T) {
	t.Setenv(ListenEnv, "127.0.0.1:9999")
	o, err := parseFlags(nil, io.Discard)
	require.NoError(t, err, "listen %q (%v), want the environment's", o.listen, err)
	require.Equal(t, "127.0.0.1:9999", o.listen, "listen %q (%v), want the environment's", o.listen, err)
	t.Setenv(ListenEnv, "")
	o, _ = parseFlags(nil, io.Discard)
	require.Equal(t, defaultListen, o.listen, "listen %q, want %q", o.listen, defaultListen)
}

func TestBaseURL(t *testing.T) {
	tests := []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8092}, "http://127.0.0.1:8092/v1"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 80}, "http://127.0.0.1:80/v1"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 81}, "http://[::1]:81/v1"},
	}
	for _, tt := range tests {
		got := baseURL(tt.addr)
		assert.Equal(t, tt.want, got, "baseURL(%v) = %q, want %q", tt.addr, got, tt.want)
	}
}
