package trainer

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

type fakeCluster struct {
	noNamespace bool
	attrs       map[string]enumspb.IndexedValueType
	adds        int
}

func (f *fakeCluster) DescribeNamespace(context.Context, *workflowservice.DescribeNamespaceRequest, ...grpc.CallOption) (*workflowservice.DescribeNamespaceResponse, error) {
	if f.noNamespace {
		return nil, errors.New("namespace not found")
	}
	return &workflowservice.DescribeNamespaceResponse{}, nil
}

func (f *fakeCluster) ListSearchAttributes(context.Context, *operatorservice.ListSearchAttributesRequest, ...grpc.CallOption) (*operatorservice.ListSearchAttributesResponse, error) {
	out := map[string]enumspb.IndexedValueType{}
	for k, v := range f.attrs {
		out[k] = v
	}
	return &operatorservice.ListSearchAttributesResponse{CustomAttributes: out}, nil
}

func (f *fakeCluster) AddSearchAttributes(_ context.Context, in *operatorservice.AddSearchAttributesRequest, _ ...grpc.CallOption) (*operatorservice.AddSearchAttributesResponse, error) {
	f.adds++
	for k, v := range in.GetSearchAttributes() {
		f.attrs[k] = v
	}
	return &operatorservice.AddSearchAttributesResponse{}, nil
}

func TestSetupRegistersWhatIsMissingOnce(t *testing.T) {
	f := &fakeCluster{attrs: map[string]enumspb.IndexedValueType{rollout.SARolloutID: enumspb.INDEXED_VALUE_TYPE_KEYWORD}}
	res, err := setup(t.Context(), f, f, "ns1")
	require.NoError(t, err)
	require.Equal(t, []string{rollout.SARolloutID}, res.Present)
	require.Len(t, res.Registered, len(rollout.SearchAttributes())-1)
	require.Equal(t, rollout.SearchAttributes(), f.attrs)

	again, err := setup(t.Context(), f, f, "ns1")
	require.NoError(t, err)
	require.Empty(t, again.Registered, "a second setup registers nothing")
	require.Equal(t, 1, f.adds)
}

func TestSetupRefuses(t *testing.T) {
	_, err := setup(t.Context(), &fakeCluster{noNamespace: true}, &fakeCluster{}, "nope")
	require.ErrorContains(t, err, `namespace "nope"`)

	wrong := &fakeCluster{attrs: map[string]enumspb.IndexedValueType{rollout.SARolloutTurn: enumspb.INDEXED_VALUE_TYPE_KEYWORD}}
	_, err = setup(t.Context(), wrong, wrong, "ns1")
	require.ErrorContains(t, err, "RolloutTurn is registered as Keyword")
	require.Zero(t, wrong.adds, "nothing changed")
}
