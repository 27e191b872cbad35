package model_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
)

// fakeModel is an OpenAI-compatible Chat Completions endpoint that records
// the request bodies it gets.
type fakeModel struct {
	*httptest.Server

	mu       sync.Mutex
	requests []map[string]any
	answer   func(r *http.Request, body map[string]any) testsupport.Answer
}

func newFakeModel(t *testing.T, fn func(r *http.Request, body map[string]any) testsupport.Answer) *fakeModel {
	t.Helper()
	f := &fakeModel{answer: fn}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.requests = append(f.requests, body)
		f.mu.Unlock()
		f.answer(r, body).Write(w)
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func (f *fakeModel) lastRequest(t *testing.T) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.requests, "the model endpoint got no request")
	return f.requests[len(f.requests)-1]
}

func (f *fakeModel) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}
