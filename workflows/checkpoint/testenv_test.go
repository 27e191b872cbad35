package checkpoint_test

import (
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
)

// newTestEnv is a test workflow environment whose deadlock detection allows
// a minute instead of the SDK's 1 s: under -race on a loaded CI machine a
// workflow goroutine of a checkpoint test ran over a second between yields and
// failed as a "potential deadlock" (TestCheckpointCommitsThenResumes). A real
// deadlock still fails the test, a minute later.
func newTestEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
	return env
}
