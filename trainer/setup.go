package trainer

import (
	"context"
	"fmt"
	"sort"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// SetupResult says what Setup found and did.
type SetupResult struct {
	Namespace string `json:"namespace"`
	// Registered are the search attributes Setup added; Present the ones the
	// namespace had already, with the right type.
	Registered []string `json:"registered"`
	Present    []string `json:"present"`
}

// operatorAPI is the part of the operator service Setup uses.
type operatorAPI interface {
	ListSearchAttributes(ctx context.Context, in *operatorservice.ListSearchAttributesRequest, opts ...grpc.CallOption) (*operatorservice.ListSearchAttributesResponse, error)
	AddSearchAttributes(ctx context.Context, in *operatorservice.AddSearchAttributesRequest, opts ...grpc.CallOption) (*operatorservice.AddSearchAttributesResponse, error)
}

// namespaceAPI is the part of the workflow service Setup uses.
type namespaceAPI interface {
	DescribeNamespace(ctx context.Context, in *workflowservice.DescribeNamespaceRequest, opts ...grpc.CallOption) (*workflowservice.DescribeNamespaceResponse, error)
}

// Setup prepares a namespace of any Temporal cluster for turnstile: it
// checks that the namespace exists and registers every search attribute
// turnstile sets (rollout.SearchAttributes) that it lacks. It is
// idempotent; an attribute registered with another type is an error naming
// it, and nothing is changed then.
func (c *Client) Setup(ctx context.Context, namespace string) (SetupResult, error) {
	return setup(ctx, c.tc.WorkflowService(), c.tc.OperatorService(), namespace)
}

func setup(ctx context.Context, ns namespaceAPI, op operatorAPI, namespace string) (SetupResult, error) {
	if _, err := ns.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace}); err != nil {
		return SetupResult{}, fmt.Errorf("namespace %q: %w (create it first, e.g. temporal operator namespace create)", namespace, err)
	}
	list, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return SetupResult{}, fmt.Errorf("list search attributes of %q: %w", namespace, err)
	}
	have := list.GetCustomAttributes()
	res := SetupResult{Namespace: namespace, Registered: []string{}, Present: []string{}}
	missing := map[string]enumspb.IndexedValueType{}
	want := rollout.SearchAttributes()
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		got, ok := have[name]
		switch {
		case !ok:
			missing[name] = want[name]
			res.Registered = append(res.Registered, name)
		case got != want[name]:
			return SetupResult{}, fmt.Errorf("search attribute %s is registered as %s in %q; turnstile needs %s (nothing changed)", name, got, namespace, want[name])
		default:
			res.Present = append(res.Present, name)
		}
	}
	if len(missing) == 0 {
		return res, nil
	}
	_, err = op.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	if err != nil {
		return SetupResult{}, fmt.Errorf("register search attributes %v in %q: %w", res.Registered, namespace, err)
	}
	return res, nil
}
