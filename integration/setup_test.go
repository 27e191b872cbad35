package integration_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// starter setup prepares a namespace the way an operator of a real cluster
// must before the first submit: every search attribute turnstile sets is
// registered, with its type, and a second run changes nothing.
func TestStarterSetupRegistersSearchAttributes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newCluster(t)
	c.startTemporal()
	_, err := c.client.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: "setup-ns", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	})
	require.NoError(t, err)

	// The namespace shows up in the frontend's cache after a moment:
	// retry until setup can see it, bounded by ctx.
	var out string
	c.waitFor("setup of a new namespace", nil, 2*time.Minute, func() bool {
		out, err = c.starter(ctx, "setup", "--namespace", "setup-ns", "-o", "json")
		return err == nil
	})
	var first struct {
		Namespace  string   `json:"namespace"`
		Registered []string `json:"registered"`
		Present    []string `json:"present"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &first), out)
	require.Equal(t, "setup-ns", first.Namespace)
	require.Len(t, append(first.Registered, first.Present...), len(rollout.SearchAttributes()))

	list, err := c.client.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "setup-ns"})
	require.NoError(t, err)
	for name, typ := range rollout.SearchAttributes() {
		require.Equal(t, typ, list.GetCustomAttributes()[name], "search attribute %s", name)
	}

	out, err = c.starter(ctx, "setup", "--namespace", "setup-ns")
	require.NoError(t, err, out)
	require.Contains(t, out, "registered none", "a second setup registers nothing")

	out, err = c.starter(ctx, "setup", "--namespace", "no-such-namespace")
	require.Error(t, err)
	require.Contains(t, out, `namespace "no-such-namespace"`)
}
