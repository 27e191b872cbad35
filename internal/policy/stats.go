package policy

import (
	"net/http"
	"sync"
)

// StatsPath reports what the server generated, request by request: a test
// computes from it how many tokens a crash made the endpoint generate twice,
// counted where they are generated rather than by the client that lost them.
const StatsPath = "/stats"

// maxRequestRecords bounds the requests Stats remembers (the oldest go).
const maxRequestRecords = 10000

// Stats is the answer of GET /stats.
type Stats struct {
	// GeneratedTokens counts every token the server generated, over all
	// requests. A streamed token is counted as it is generated, just before
	// its chunk is sent, so a client never holds a token not counted yet.
	GeneratedTokens int64 `json:"generated_tokens"`
	// Requests are the latest generating requests, oldest first.
	Requests []RequestRecord `json:"requests"`
}

// RequestRecord is one generating request.
type RequestRecord struct {
	Seq   int64  `json:"seq"`
	Route string `json:"route"` // "chat", "completions" or "generate"
	Model string `json:"model"`
	// Key names the generation: the digest of the rendered chat it answers
	// (the prompt without any generated prefix), equal for a first request
	// and each continuation of it.
	Key string `json:"key"`
	// Start is the number of generated tokens the request continued from
	// (the prefix in its token-id prompt); 0 for a chat request.
	Start int `json:"start"`
	// Generated counts the tokens the request generated; Finished says it sent
	// its answer to the end (not cut by a client that went away).
	Generated int  `json:"generated"`
	Finished  bool `json:"finished"`
}

// requestStats keeps the records.
type requestStats struct {
	mu        sync.Mutex
	seq       int64
	generated int64
	records   []*RequestRecord
}

// begin records a new request.
func (s *requestStats) begin(route, model, key string, start int) *RequestRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	r := &RequestRecord{Seq: s.seq, Route: route, Model: model, Key: key, Start: start}
	if len(s.records) == maxRequestRecords {
		s.records = s.records[1:]
	}
	s.records = append(s.records, r)
	return r
}

// sent counts n more tokens of r.
func (s *requestStats) sent(r *RequestRecord, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Generated += n
	s.generated += int64(n)
}

// finish marks r sent to the end.
func (s *requestStats) finish(r *RequestRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Finished = true
}

func (s *requestStats) snapshot() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{GeneratedTokens: s.generated, Requests: make([]RequestRecord, 0, len(s.records))}
	for _, r := range s.records {
		out.Requests = append(out.Requests, *r)
	}
	return out
}

func (s *server) stats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.counts.snapshot())
}
