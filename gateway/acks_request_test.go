package gateway

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/trainer"
)

// An acknowledgement reaches the client library under its request_id, with
// its receipts named as the JSON array they came in, so the library can
// keep the request's record and name a bad receipt as receipts[i].
func TestAcksCarryRequestIDAndNames(t *testing.T) {
	var got trainer.AckRequest
	f := &fakeBackend{runs: 1, ack: func(r trainer.AckRequest) (trainer.AckSummary, error) {
		got = r
		return trainer.AckSummary{Acknowledged: 1}, nil
	}}
	s := newTestServer(t, f)
	body := `{"request_id":"ack-7","receipts":[` + receiptJSON("s1-0000", 'a') + `]}`
	decodeOK[AckResponse](t, call(t, s, "POST", "/v1/sets/s1/acks", body), http.StatusOK)
	require.Equal(t, "ack-7", got.RequestID, "client request %+v: want request id ack-7 and field receipts", got)
	require.Equal(t, "receipts", got.Field, "client request %+v: want request id ack-7 and field receipts", got)
}

// A 409 of an acknowledgement names the field at fault, as 400s do: the
// receipt that does not match, or the request_id used for other receipts.
func TestAcksConflictNamesField(t *testing.T) {
	for _, field := range []string{"receipts[1].sha256", "receipts[0]", "request_id"} {
		f := &fakeBackend{runs: 1, ack: func(trainer.AckRequest) (trainer.AckSummary, error) {
			return trainer.AckSummary{}, &trainer.ConflictError{Field: field, Msg: "does not match: " + field}
		}}
		s := newTestServer(t, f)
		body := `{"request_id":"a","receipts":[` + receiptJSON("s1-0000", 'a') + "," + receiptJSON("s1-0001", 'b') + `]}`
		b := expectError(t, call(t, s, "POST", "/v1/sets/s1/acks", body), http.StatusConflict, CodeConflict, field)
		assert.Contains(t, b.Error.Message, field, "message %q", b.Error.Message)
	}
}

// TestAcksCountTheSetOnce: the set's runs are counted (a pass over the set
// in visibility) for its first acknowledgement only; an unknown set is a
// 404 every time.
func TestAcksCountTheSetOnce(t *testing.T) {
	f := &fakeBackend{runs: 1}
	s := newTestServer(t, f)
	for i := range 3 {
		body := fmt.Sprintf(`{"request_id":"ack-%d","receipts":[%s]}`, i, receiptJSON("s1-0000", 'a'))
		decodeOK[AckResponse](t, call(t, s, "POST", "/v1/sets/s1/acks", body), http.StatusOK)
	}
	require.Equal(t, 1, f.count("CountRuns"), "three acknowledgements of one set")
	f.runs = 0
	for range 2 {
		expectError(t, call(t, s, "POST", "/v1/sets/s2/acks", `{"request_id":"a","receipts":[`+receiptJSON("s2-0000", 'a')+`]}`), http.StatusNotFound, CodeNotFound, "set")
	}
	require.Equal(t, 3, f.count("CountRuns"), "an unknown set is looked for each time")
}
