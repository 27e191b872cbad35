package protocol

import (
	"context"
	"net/http"
)

// ControlClient calls a participant's checkpoint control plane with a bearer
// token. Error answers are *RemoteError, as on the data plane.
type ControlClient struct {
	c *Client
}

// NewControlClient returns a control client for the server at baseURL. A nil
// hc means http.DefaultClient's settings; the token is added to every
// request by a wrapping transport, so hc itself is not modified.
func NewControlClient(baseURL, token string, hc *http.Client) *ControlClient {
	return &ControlClient{c: NewClient(baseURL, withBearer(hc, token))}
}

// withBearer returns a copy of hc (nil: http.DefaultClient) whose transport
// adds "Authorization: Bearer token" to every request.
func withBearer(hc *http.Client, token string) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	withToken := *hc
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	withToken.Transport = bearerTransport{base: base, header: "Bearer " + token}
	return &withToken
}

type bearerTransport struct {
	base   http.RoundTripper
	header string
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.header)
	return t.base.RoundTrip(r)
}

// Capabilities describes the participant.
func (cc *ControlClient) Capabilities(ctx context.Context) (Capabilities, error) {
	var out Capabilities
	err := cc.c.call(ctx, RouteControlCapabilities, "", nil, &out)
	return out, err
}

// Status reads the checkpoint phase, admission and in-flight mutations.
func (cc *ControlClient) Status(ctx context.Context) (ControlStatus, error) {
	var out ControlStatus
	err := cc.c.call(ctx, RouteControlStatus, "", nil, &out)
	return out, err
}

// Prepare closes admission, drains in-flight mutations until req.Deadline
// and freezes the cut.
func (cc *ControlClient) Prepare(ctx context.Context, req PrepareRequest) (PrepareResponse, error) {
	var out PrepareResponse
	err := cc.c.call(ctx, RouteControlPrepare, "", req, &out)
	return out, err
}

// Commit writes the frozen cut to req.Location.
func (cc *ControlClient) Commit(ctx context.Context, req CommitRequest) (CommitResponse, error) {
	var out CommitResponse
	err := cc.c.call(ctx, RouteControlCommit, "", req, &out)
	return out, err
}

// Restore validates the checkpoint at req.Location and installs it as the
// new attempts; admission stays closed until Resume.
func (cc *ControlClient) Restore(ctx context.Context, req RestoreRequest) (RestoreResponse, error) {
	var out RestoreResponse
	err := cc.c.call(ctx, RouteControlRestore, "", req, &out)
	return out, err
}

// Resume reopens admission and retires the checkpoint id (or the restore
// session of that id); it is also the abort.
func (cc *ControlClient) Resume(ctx context.Context, checkpointID string) (ResumeResponse, error) {
	var out ResumeResponse
	err := cc.c.call(ctx, RouteControlResume, "", ResumeRequest{CheckpointID: checkpointID}, &out)
	return out, err
}

// ResumeRestore ends restore session restoreID of checkpointID: admission
// reopens and the restore id is retired.
func (cc *ControlClient) ResumeRestore(ctx context.Context, checkpointID, restoreID string) (ResumeResponse, error) {
	var out ResumeResponse
	err := cc.c.call(ctx, RouteControlResume, "", ResumeRequest{CheckpointID: checkpointID, RestoreID: restoreID}, &out)
	return out, err
}

// Retire ends attempt of rolloutID: its session is dropped and it is fenced
// out.
func (cc *ControlClient) Retire(ctx context.Context, rolloutID string, attempt int) (RetireResponse, error) {
	var out RetireResponse
	err := cc.c.call(ctx, RouteControlRetire, "", RetireRequest{RolloutID: rolloutID, Attempt: attempt}, &out)
	return out, err
}

// Authorise installs attempt of rolloutID for a fresh start (a start-over):
// only after it does the participant accept a data-plane start of that
// attempt.
func (cc *ControlClient) Authorise(ctx context.Context, rolloutID string, attempt int) (AuthoriseResponse, error) {
	var out AuthoriseResponse
	err := cc.c.call(ctx, RouteControlAuthorise, rolloutID, AuthoriseRequest{Attempt: attempt}, &out)
	return out, err
}

// Do sends a JSON request with the token to path and decodes the answer
// into out (when not nil), for routes and bodies the typed methods do not
// cover.
func (cc *ControlClient) Do(ctx context.Context, method, path string, in, out any) error {
	return cc.c.Do(ctx, method, path, in, out)
}
