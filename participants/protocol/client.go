package protocol

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client calls an environment server's data plane.
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a client for the server at baseURL (e.g.
// "http://127.0.0.1:8091"). A nil hc means http.DefaultClient.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: hc}
}

// NewDataClient returns a data-plane client that sends the data token
// (docs/protocol/RULES.md R1) with every request. hc is not modified.
func NewDataClient(baseURL, token string, hc *http.Client) *Client {
	return NewClient(baseURL, withBearer(hc, token))
}

// BaseURL is the server's address.
func (c *Client) BaseURL() string { return c.base }

// Start seeds a session.
func (c *Client) Start(ctx context.Context, req StartRequest) (StartResponse, error) {
	var out StartResponse
	err := c.call(ctx, RouteStart, "", req, &out)
	return out, err
}

// Operate applies one mutation.
func (c *Client) Operate(ctx context.Context, req OperateRequest) (OperateResponse, error) {
	var out OperateResponse
	err := c.call(ctx, RouteOperate, req.RolloutID, req, &out)
	return out, err
}

// Verify scores and retires the session.
func (c *Client) Verify(ctx context.Context, req VerifyRequest) (VerifyResponse, error) {
	var out VerifyResponse
	err := c.call(ctx, RouteVerify, req.RolloutID, req, &out)
	return out, err
}

// Session describes one session.
func (c *Client) Session(ctx context.Context, rolloutID string) (SessionInfo, error) {
	var out SessionInfo
	err := c.call(ctx, RouteSessions, rolloutID, nil, &out)
	return out, err
}

// Stats reads the server's counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	err := c.call(ctx, RouteStats, "", nil, &out)
	return out, err
}

// Do sends a JSON request to path and decodes the JSON answer into out (when
// out is not nil). An error answer becomes a *RemoteError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, method, path, in, out)
}

// call sends in to route, a Route* constant ("METHOD /path"), with
// rolloutID in place of its {rollout_id}: the client and the server's mux
// share one spelling of every route.
func (c *Client) call(ctx context.Context, route, rolloutID string, in, out any) error {
	method, path, ok := strings.Cut(route, " ")
	if !ok {
		return fmt.Errorf("route %q has no method", route)
	}
	return c.do(ctx, method, strings.Replace(path, "{rollout_id}", url.PathEscape(rolloutID), 1), in, out)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s%s: %w", method, c.base, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		var eb ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			return &RemoteError{Status: resp.StatusCode, Code: "http_" + fmt.Sprint(resp.StatusCode), Message: strings.TrimSpace(string(data))}
		}
		return &RemoteError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}
