package visibility

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// HistoryReader is the history part of a Temporal client.
type HistoryReader interface {
	GetWorkflowHistory(ctx context.Context, workflowID, runID string, isLongPoll bool, filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator
}

// DecodeStartInput reads the input a run was started with (the first event
// of its history) into out: a rollout's Input, or a coordinator run's.
// Shared by the client library (which environment a run used) and the
// coordinator (where a run's sessions live, the set of a checkpoint).
func DecodeStartInput(ctx context.Context, h HistoryReader, workflowID, runID string, out any) error {
	iter := h.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !iter.HasNext() {
		return errors.New("empty history")
	}
	ev, err := iter.Next()
	if err != nil {
		return err
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil || len(attrs.GetInput().GetPayloads()) == 0 {
		return fmt.Errorf("first event %s carries no start input", ev.GetEventType())
	}
	if err := converter.GetDefaultDataConverter().FromPayload(attrs.GetInput().GetPayloads()[0], out); err != nil {
		return fmt.Errorf("decode start input: %w", err)
	}
	return nil
}
