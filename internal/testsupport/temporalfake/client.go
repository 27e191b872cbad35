// Package temporalfake is a Temporal client for tests: client.Client with
// each call a test answers set as a function, the visibility listing paged
// as a server pages it, a record of what was asked, and the small values
// the answers are made of (runs, update handles, encoded values, payloads,
// histories). Only tests import it.
package temporalfake

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
)

// Client answers the calls whose function is set. Any other call, and a
// call whose function is nil, panics on the nil embedded client.Client: a
// test that makes a call it did not plan for fails loudly. The functions
// may be called concurrently; they guard their own state.
type Client struct {
	client.Client

	// Pages, when set, are ListWorkflow's answers, one a call, in order:
	// each but the last carries a next-page token, and a call must bring
	// back the token the one before it got (a call without a token starts
	// again from the first page).
	Pages [][]*workflowpb.WorkflowExecutionInfo
	// List answers ListWorkflow when Pages is nil: every execution that
	// matches the query, served PageSize at a time (0: the request's page
	// size, or all at once when that is 0 too), the next one's offset in
	// the token.
	List     func(query string) ([]*workflowpb.WorkflowExecutionInfo, error)
	PageSize int

	// Count answers CountWorkflow.
	Count func(query string) (int64, error)
	// Describe answers DescribeWorkflowExecution, and DescribeWorkflow
	// with the response as its RawResponse.
	Describe func(workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	// Execute answers ExecuteWorkflow.
	Execute func(o client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
	// GetRun answers GetWorkflow.
	GetRun func(workflowID, runID string) client.WorkflowRun
	// Update answers UpdateWorkflow.
	Update func(o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
	// UpdateWithStart answers UpdateWithStartWorkflow; its start operation
	// is a *StartOperation (NewWithStartWorkflowOperation makes one).
	UpdateWithStart func(o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error)
	// Query answers QueryWorkflow.
	Query func(workflowID, runID, queryType string, args ...any) (converter.EncodedValue, error)
	// QueryWithOptions answers QueryWorkflowWithOptions.
	QueryWithOptions func(req *client.QueryWorkflowWithOptionsRequest) (*client.QueryWorkflowWithOptionsResponse, error)
	// Signal answers SignalWorkflow.
	Signal func(workflowID, runID, signalName string, arg any) error
	// Terminate answers TerminateWorkflow.
	Terminate func(workflowID, runID, reason string) error
	// Cancel answers CancelWorkflow.
	Cancel func(workflowID, runID string) error
	// History answers GetWorkflowHistory.
	History func(workflowID, runID string) client.HistoryEventIterator

	mu        sync.Mutex
	next      string // the token the last ListWorkflow call gave (Pages)
	page      int
	lists     []string
	counts    []string
	described []string
	queried   []string
	updates   []client.UpdateWorkflowOptions
	starts    []client.StartWorkflowOptions
}

// ListWorkflow serves Pages, or what List matches a page at a time.
func (c *Client) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	c.mu.Lock()
	c.lists = append(c.lists, req.GetQuery())
	token := string(req.GetNextPageToken())
	if c.Pages != nil {
		defer c.mu.Unlock()
		return c.nextPage(token)
	}
	c.mu.Unlock()
	all, err := c.List(req.GetQuery())
	if err != nil {
		return nil, err
	}
	from := 0
	if token != "" {
		if from, err = strconv.Atoi(token); err != nil || from < 0 || from > len(all) {
			return nil, fmt.Errorf("temporalfake: page token %q is not one ListWorkflow gave", token)
		}
	}
	size := c.PageSize
	if size == 0 {
		size = int(req.GetPageSize())
	}
	to := len(all)
	if size > 0 {
		to = min(from+size, len(all))
	}
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: all[from:to]}
	if to < len(all) {
		resp.NextPageToken = []byte(strconv.Itoa(to))
	}
	return resp, nil
}

// nextPage serves Pages; c.mu is held.
func (c *Client) nextPage(token string) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	switch {
	case token == "":
		c.page = 0
	case token != c.next:
		return nil, fmt.Errorf("temporalfake: page token %q, want %q", token, c.next)
	}
	if c.page >= len(c.Pages) {
		return nil, fmt.Errorf("temporalfake: page %d of %d asked for", c.page+1, len(c.Pages))
	}
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: c.Pages[c.page]}
	c.page++
	c.next = ""
	if c.page < len(c.Pages) {
		c.next = strconv.Itoa(c.page)
		resp.NextPageToken = []byte(c.next)
	}
	return resp, nil
}

// CountWorkflow answers with Count.
func (c *Client) CountWorkflow(_ context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	c.mu.Lock()
	c.counts = append(c.counts, req.GetQuery())
	c.mu.Unlock()
	n, err := c.Count(req.GetQuery())
	return &workflowservice.CountWorkflowExecutionsResponse{Count: n}, err
}

// DescribeWorkflowExecution answers with Describe.
func (c *Client) DescribeWorkflowExecution(_ context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	c.mu.Lock()
	c.described = append(c.described, workflowID)
	c.mu.Unlock()
	return c.Describe(workflowID, runID)
}

// DescribeWorkflow answers with Describe's response as the RawResponse.
func (c *Client) DescribeWorkflow(ctx context.Context, workflowID, runID string) (*client.WorkflowExecutionDescription, error) {
	resp, err := c.DescribeWorkflowExecution(ctx, workflowID, runID)
	if err != nil {
		return nil, err
	}
	return &client.WorkflowExecutionDescription{RawResponse: resp}, nil
}

// ExecuteWorkflow answers with Execute.
func (c *Client) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error) {
	c.mu.Lock()
	c.starts = append(c.starts, o)
	c.mu.Unlock()
	return c.Execute(o, workflow, args...)
}

// GetWorkflow answers with GetRun.
func (c *Client) GetWorkflow(_ context.Context, workflowID, runID string) client.WorkflowRun {
	return c.GetRun(workflowID, runID)
}

// UpdateWorkflow answers with Update.
func (c *Client) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.mu.Lock()
	c.updates = append(c.updates, o)
	c.mu.Unlock()
	return c.Update(o)
}

// NewWithStartWorkflowOperation is a *StartOperation of its arguments.
func (c *Client) NewWithStartWorkflowOperation(o client.StartWorkflowOptions, workflow any, args ...any) client.WithStartWorkflowOperation {
	return &StartOperation{Options: o, Workflow: workflow, Args: args}
}

// UpdateWithStartWorkflow answers with UpdateWithStart.
func (c *Client) UpdateWithStartWorkflow(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return c.UpdateWithStart(o)
}

// QueryWorkflow answers with Query.
func (c *Client) QueryWorkflow(_ context.Context, workflowID, runID, queryType string, args ...any) (converter.EncodedValue, error) {
	c.mu.Lock()
	c.queried = append(c.queried, workflowID)
	c.mu.Unlock()
	return c.Query(workflowID, runID, queryType, args...)
}

// QueryWorkflowWithOptions answers with QueryWithOptions.
func (c *Client) QueryWorkflowWithOptions(_ context.Context, req *client.QueryWorkflowWithOptionsRequest) (*client.QueryWorkflowWithOptionsResponse, error) {
	return c.QueryWithOptions(req)
}

// SignalWorkflow answers with Signal.
func (c *Client) SignalWorkflow(_ context.Context, workflowID, runID, signalName string, arg any) error {
	return c.Signal(workflowID, runID, signalName, arg)
}

// TerminateWorkflow answers with Terminate.
func (c *Client) TerminateWorkflow(_ context.Context, workflowID, runID, reason string, _ ...any) error {
	return c.Terminate(workflowID, runID, reason)
}

// CancelWorkflow answers with Cancel.
func (c *Client) CancelWorkflow(_ context.Context, workflowID, runID string) error {
	return c.Cancel(workflowID, runID)
}

// GetWorkflowHistory answers with History.
func (c *Client) GetWorkflowHistory(_ context.Context, workflowID, runID string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	return c.History(workflowID, runID)
}

// ListQueries are the queries ListWorkflow got, in order, one a call.
func (c *Client) ListQueries() []string { return c.copyOf(&c.lists) }

// CountQueries are the queries CountWorkflow got, in order.
func (c *Client) CountQueries() []string { return c.copyOf(&c.counts) }

// Described are the workflow IDs DescribeWorkflowExecution (or
// DescribeWorkflow) got, in order.
func (c *Client) Described() []string { return c.copyOf(&c.described) }

// Queried are the workflow IDs QueryWorkflow got, in order.
func (c *Client) Queried() []string { return c.copyOf(&c.queried) }

func (c *Client) copyOf(s *[]string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), *s...)
}

// Updates are the updates UpdateWorkflow got, in order.
func (c *Client) Updates() []client.UpdateWorkflowOptions {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]client.UpdateWorkflowOptions(nil), c.updates...)
}

// UpdateOf is the last update UpdateWorkflow got for workflowID.
func (c *Client) UpdateOf(workflowID string) (client.UpdateWorkflowOptions, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.updates) - 1; i >= 0; i-- {
		if c.updates[i].WorkflowID == workflowID {
			return c.updates[i], true
		}
	}
	return client.UpdateWorkflowOptions{}, false
}

// Starts are the start options ExecuteWorkflow got, in order.
func (c *Client) Starts() []client.StartWorkflowOptions {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]client.StartWorkflowOptions(nil), c.starts...)
}
