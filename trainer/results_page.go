package trainer

import (
	"context"
	"fmt"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// MaxResultsPage bounds one page of ResultsPage.
const MaxResultsPage = 1000

// ResultsPage returns one page of r.Set's finished rollouts, as Results
// reports them (a held result with its receipt, a failure with its
// reason): one visibility page of at most size finished runs from token,
// and the token of the next page (empty on the last). A run replaced by a
// later attempt, or a held result acknowledged since it was listed, is left
// out, so a page may hold fewer than size records.
func (c *Client) ResultsPage(ctx context.Context, set string, token []byte, size int) ([]RolloutRecord, []byte, error) {
	if err := rollout.ValidateSet(set); err != nil {
		return nil, nil, err
	}
	if size < 1 || size > MaxResultsPage {
		return nil, nil, fmt.Errorf("page size %d: want 1..%d", size, MaxResultsPage)
	}
	return resultsPage(ctx, c.tc, set, token, size)
}

func resultsPage(ctx context.Context, src exportSource, set string, token []byte, size int) ([]RolloutRecord, []byte, error) {
	q := rollout.SetQuery(set) + " AND " + finishedQuery
	resp, err := src.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: int32(size), NextPageToken: token})
	if err != nil {
		return nil, nil, fmt.Errorf("list results of set %q: %w", set, err)
	}
	infos := resp.GetExecutions()
	fence, err := visibility.ReadSetFence(ctx, src, set)
	if err != nil {
		return nil, nil, fmt.Errorf("results of set %q: %w", set, err)
	}
	runs, err := listRunsOf(ctx, src, "", workflowIDsOf(infos))
	if err != nil {
		return nil, nil, fmt.Errorf("results of set %q: %w", set, err)
	}
	recs := make([]*RolloutRecord, len(infos))
	err = fanout.Each(ctx, len(infos), fetchConcurrency, func(ctx context.Context, i int) error {
		f, ok, err := finished(ctx, src, nil, set, fence, infos[i], runs[infos[i].GetExecution().GetWorkflowId()], awaitClose)
		if ok {
			recs[i] = &f.rec
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("results of set %q: %w", set, err)
	}
	out := make([]RolloutRecord, 0, len(recs))
	for _, r := range recs {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, resp.GetNextPageToken(), nil
}
