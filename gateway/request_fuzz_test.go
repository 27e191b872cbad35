package gateway

import (
	"bytes"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// fuzzRoutes are the POST routes whose JSON bodies the fuzzer sends.
var fuzzRoutes = []string{
	"/v1/sets", "/v1/checkpoints", "/v1/restores", "/v1/resumes", "/v1/sets/s1/acks", "/v1/sets/s1/policy_version", "/v1/sets/s1/max_in_flight",
	"/v1/sets/s1/watchdog", "/v1/sets/s1/schedule", "/v1/sets/s1/schedule/tag", "/v1/sets/s1/schedule/pause", "/v1/sets/s1/schedule/trigger",
}

// FuzzGatewayRequests sends arbitrary JSON bodies to the routes that decode
// one (submit, checkpoint, restore, resume, acknowledge, policy version)
// with the right role's token, over a backend that accepts everything: no
// body may panic the gateway or earn a 5xx, and every status is one the
// OpenAPI document lists for the route.
func FuzzGatewayRequests(f *testing.F) {
	seeds := []struct {
		route int
		body  string
	}{
		{0, `{"request_id":"r","set":"s","envs":["counter"],"count":2,"seed":7,"max_turns":3}`},
		{0, `{"request_id":"r","set":"s","rows":[{"id":"a","env":"counter","task":{"target":2},"policy":{"model":"m","endpoint":"vllm"}}],"repeats":2}`},
		{0, `{"request_id":"r","set":"s","dataset_path":"good.jsonl","env_server":"b","policy_endpoint":"vllm"}`},
		{0, `{"request_id":"r","set":"s","envs":["counter"],"count":1,"env_url":"http://127.0.0.1:8091","model_url":"http://x/v1","limits":{"deadline":"1m"},"sampling":{"temperature":0.5}}`},
		{0, `{"request_id":"r","set":"s","dataset_path":"../../etc/passwd"}`},
		{1, `{"request_id":"c","checkpoint_id":"k1","set":"s1","participants":["http://h:1"],"timeout":"60s","stay_paused":true}`},
		{1, `{"request_id":"c","checkpoint_id":"k1","set":"s1","participants":["http://attacker"],"deadline":"2030-01-01T00:00:00Z"}`},
		{2, `{"request_id":"r","checkpoint_id":"k1","restore_id":"again","participants":["http://h:1"]}`},
		{3, `{"request_id":"r","set":"s1","checkpoint_id":"k1","participants":["http://b.internal:8091"]}`},
		{4, `{"request_id":"a","receipts":[{"rollout_id":"s1-0000","attempt":0,"sha256":"` + string(bytes.Repeat([]byte("a"), 64)) + `"}]}`},
		{5, `{"request_id":"p","version":10,"max_lag":2,"action":"cancel"}`},
		{7, `{"request_id":"w","participants":["http://h:1"],"standby":["http://b.internal:8091"],"every":"1s","timeout":"1s","misses":2,"bound":"3s"}`},
		{8, `{"request_id":"c","every":"10m","participants":["http://h:1"],"tag":"step-1","keep":3,"timeout":"60s","paused":true}`},
		{9, `{"request_id":"t","tag":"step-2"}`}, {10, `{"request_id":"p","note":"why"}`}, {11, `{"request_id":"g"}`},
		{0, `{`}, {1, `[]`}, {4, `{"request_id":"a","receipts":[{}]}`}, {0, `null`}, {3, `{"participants":[""]}`},
	}
	for _, s := range seeds {
		f.Add(uint8(s.route), []byte(s.body))
	}
	s, _, _ := datasetServer(f, &fakeBackend{runs: 1})
	documented := docStatuses(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		target := fuzzRoutes[int(route)%len(fuzzRoutes)]
		token := testToken
		if operatorCall("POST", target) {
			token = testOperatorToken
		}
		req := httptest.NewRequest("POST", target, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("POST %s %q: %d %s", target, body, rec.Code, rec.Body)
		}
		if want := documented["POST "+routePattern(target)]; !slices.Contains(want, rec.Code) {
			t.Fatalf("POST %s %q: %d, which the document does not list (%v)", target, body, rec.Code, want)
		}
	})
}

// routePattern is the pattern of a fuzzed target.
func routePattern(target string) string {
	if set, name, ok := strings.Cut(strings.TrimPrefix(target, "/v1/sets/"), "/"); ok && set != "" {
		return "/v1/sets/{set}/" + name
	}
	return target
}
