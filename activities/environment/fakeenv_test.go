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
	route(f, mux, protocol.RouteStart, &f.starts, &f.start, nil)
	route(f, mux, protocol.RouteOperate, &f.operates, &f.operate, func(r *http.Request, req protocol.OperateRequest) bool {
		return r.PathValue("rollout_id") == req.RolloutID
	})
	route(f, mux, protocol.RouteVerify, &f.verifies, &f.verify, nil)
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// route serves pattern: each request is decoded as a Req, refused when
// the path and body disagree (agree, when set, says whether they do),
// recorded in got and answered by answer (both under f.mu).
func route[Req any](f *fakeEnv, mux *http.ServeMux, pattern string, got *[]Req, answer *func(Req) testsupport.Answer, agree func(*http.Request, Req) bool) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if !decode(w, r, &req) {
			return
		}
		if agree != nil && !agree(r, req) {
			envRefusal(http.StatusBadRequest, protocol.CodeMalformed, "path and body disagree").Write(w)
			return
		}
		f.mu.Lock()
		*got = append(*got, req)
		h := *answer
		f.mu.Unlock()
		h(req).Write(w)
	})
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
