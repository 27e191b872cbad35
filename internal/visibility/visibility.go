package visibility

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
)

// This file is the one way to find a set's rollouts in Temporal visibility
// and to read their search attributes, shared by the checkpoint coordinator
// and the client library, so both agree on the query and on the decoding.

// Lister is the visibility part of a Temporal client.
type Lister interface {
	ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// listPageSize is the visibility page size; ListSet pages through all.
const listPageSize = 1000

// ListSet pages through every run of set's rollouts that visibility holds
// (extra, when not empty, is ANDed to the set filter), calling fn for each;
// an error from fn stops the listing and is returned.
func ListSet(ctx context.Context, l Lister, set, extra string, fn func(*workflowpb.WorkflowExecutionInfo) error) error {
	query := rollout.SetQuery(set)
	if extra != "" {
		query += " AND " + extra
	}
	var token []byte
	for {
		resp, err := l.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: listPageSize})
		if err != nil {
			return fmt.Errorf("list rollouts of set %q (%s): %w", set, query, err)
		}
		for _, e := range resp.GetExecutions() {
			if err := fn(e); err != nil {
				return err
			}
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// SAInt decodes an Int search attribute; ok is false when it is missing or
// not an integer.
func SAInt(sa *commonpb.SearchAttributes, name string) (int64, bool) {
	var v int64
	ok := decodeSA(sa, name, &v)
	return v, ok
}

// SATime decodes a Datetime search attribute; ok is false when it is
// missing or not a time.
func SATime(sa *commonpb.SearchAttributes, name string) (time.Time, bool) {
	var v time.Time
	ok := decodeSA(sa, name, &v)
	return v, ok
}

// VisibilityTime is t as a visibility query compares Datetime attributes
// ("RolloutFinishedAt >= " + VisibilityTime(t)), quoted.
func VisibilityTime(t time.Time) string { return strconv.Quote(t.UTC().Format(time.RFC3339Nano)) }

// SAKeyword decodes a Keyword search attribute; ok is false when it is
// missing or not a string.
func SAKeyword(sa *commonpb.SearchAttributes, name string) (string, bool) {
	var v string
	ok := decodeSA(sa, name, &v)
	return v, ok
}

func decodeSA(sa *commonpb.SearchAttributes, name string, ptr any) bool {
	p, ok := sa.GetIndexedFields()[name]
	if !ok || p == nil {
		return false
	}
	return converter.GetDefaultDataConverter().FromPayload(p, ptr) == nil
}
