package environment_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

func envRefusal(status int, code, message string) testsupport.Answer {
	return testsupport.Answer{Status: status, Body: protocol.ErrorBody{Error: protocol.ErrorDetail{Code: code, Message: message}}}
}

// fakeEnv speaks the environment server's data-plane wire types and records
// every request it gets.
type fakeEnv struct {
	*httptest.Server

	mu       sync.Mutex
	starts   []protocol.StartRequest
	operates []protocol.OperateRequest
	verifies []protocol.VerifyRequest

	start   func(protocol.StartRequest) testsupport.Answer
	operate func(protocol.OperateRequest) testsupport.Answer
	verify  func(protocol.VerifyRequest) testsupport.Answer
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	f := &fakeEnv{}
	mux := http.NewServeMux()
	mux.HandleFunc(protocol.RouteStart, func(w http.ResponseWriter, r *http.Request) {
		var req protocol.StartRequest
		if !decode(w, r, &req) {
			return
		}
		f.mu.Lock()
		f.starts = append(f.starts, req)
		h := f.start
		f.mu.Unlock()
		h(req).Write(w)
	})
	mux.HandleFunc(protocol.RouteOperate, func(w http.ResponseWriter, r *http.Request) {
		var req protocol.OperateRequest
		if !decode(w, r, &req) {
			return
		}
		if r.PathValue("rollout_id") != req.RolloutID {
			envRefusal(http.StatusBadRequest, protocol.CodeMalformed, "path and body disagree").Write(w)
			return
		}
		f.mu.Lock()
		f.operates = append(f.operates, req)
		h := f.operate
		f.mu.Unlock()
		h(req).Write(w)
	})
	mux.HandleFunc(protocol.RouteVerify, func(w http.ResponseWriter, r *http.Request) {
		var req protocol.VerifyRequest
		if !decode(w, r, &req) {
			return
		}
		f.mu.Lock()
		f.verifies = append(f.verifies, req)
		h := f.verify
		f.mu.Unlock()
		h(req).Write(w)
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		envRefusal(http.StatusBadRequest, protocol.CodeMalformed, err.Error()).Write(w)
		return false
	}
	return true
}

func (f *fakeEnv) startRequests() []protocol.StartRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.StartRequest(nil), f.starts...)
}

func (f *fakeEnv) verifyRequests() []protocol.VerifyRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.VerifyRequest(nil), f.verifies...)
}

func (f *fakeEnv) operateRequests() []protocol.OperateRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.OperateRequest(nil), f.operates...)
}
