package temporalfake

import (
	"context"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// Payload is v as the default data converter encodes it (a search
// attribute, a memo field, an input). It panics when v cannot be encoded:
// a mistake in the test.
func Payload(v any) *commonpb.Payload {
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		panic(err)
	}
	return p
}

// decode puts v into ptr the way a client decodes a result: through the
// default data converter. A nil v or ptr leaves ptr alone.
func decode(v, ptr any) error {
	if v == nil || ptr == nil {
		return nil
	}
	return converter.GetDefaultDataConverter().FromPayload(Payload(v), ptr)
}

// Value is an encoded value holding V: a query's answer.
type Value struct{ V any }

// HasValue reports whether V is set.
func (v Value) HasValue() bool { return v.V != nil }

// Get decodes V into ptr.
func (v Value) Get(ptr any) error { return decode(v.V, ptr) }

// Run is a workflow run whose result is Value, or Err. Calls other than
// GetID, GetRunID and Get panic.
type Run struct {
	client.WorkflowRun
	ID, RunID string
	Value     any
	Err       error
}

// GetID is the run's workflow ID.
func (r Run) GetID() string { return r.ID }

// GetRunID is the run's ID.
func (r Run) GetRunID() string { return r.RunID }

// Get decodes Value into valuePtr, or fails with Err.
func (r Run) Get(_ context.Context, valuePtr any) error {
	if r.Err != nil {
		return r.Err
	}
	return decode(r.Value, valuePtr)
}

// UpdateHandle is an accepted update whose outcome is Value, or Err.
type UpdateHandle struct {
	ID, Run, Update string // workflow, run and update IDs
	Value           any
	Err             error
}

// WorkflowID is the updated workflow's ID.
func (h UpdateHandle) WorkflowID() string { return h.ID }

// RunID is the updated run's ID.
func (h UpdateHandle) RunID() string { return h.Run }

// UpdateID is the update's ID.
func (h UpdateHandle) UpdateID() string { return h.Update }

// Get decodes Value into valuePtr, or fails with Err.
func (h UpdateHandle) Get(_ context.Context, valuePtr any) error {
	if h.Err != nil {
		return h.Err
	}
	return decode(h.Value, valuePtr)
}

// StartOperation is the start half of an update-with-start, as
// Client.NewWithStartWorkflowOperation made it.
type StartOperation struct {
	Options  client.StartWorkflowOptions
	Workflow any
	Args     []any
}

// Get has no run to give.
func (*StartOperation) Get(context.Context) (client.WorkflowRun, error) { return nil, nil }

// History iterates over Events.
type History struct{ Events []*historypb.HistoryEvent }

// HasNext reports whether an event is left.
func (h *History) HasNext() bool { return len(h.Events) > 0 }

// Next is the next event.
func (h *History) Next() (*historypb.HistoryEvent, error) {
	ev := h.Events[0]
	h.Events = h.Events[1:]
	return ev, nil
}
