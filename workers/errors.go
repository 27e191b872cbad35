package workers

import (
	"context"
	"errors"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
)

// applicationErrors is a worker interceptor that keeps an activity's
// classification when the error it returns wraps an application error
// (fmt.Errorf("commit checkpoint k1: %w", refusal)). Temporal's failure
// converter looks only at the outermost error: a wrapped non-retryable
// refusal would reach the server as a retryable error of type
// "*fmt.wrapError" and be retried until its timeout. One rule at the
// activity boundary, instead of one at every return: the error goes out as
// the application error it wraps, with the whole message.
type applicationErrors struct {
	interceptor.WorkerInterceptorBase
}

func (*applicationErrors) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityErrors{}
	a.Next = next
	return a
}

type activityErrors struct {
	interceptor.ActivityInboundInterceptorBase
}

func (a *activityErrors) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	out, err := a.Next.ExecuteActivity(ctx, in)
	return out, unwrapApplicationError(err)
}

// unwrapApplicationError returns err as the application error it wraps
// (same type, retryability, retry delay and category; the message is err's
// whole message), or err itself when it is one already or wraps none.
func unwrapApplicationError(err error) error {
	var app *temporal.ApplicationError
	if err == nil || !errors.As(err, &app) || error(app) == err {
		return err
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), app.Type(), temporal.ApplicationErrorOptions{
		NonRetryable:   app.NonRetryable(),
		Cause:          app.Unwrap(),
		NextRetryDelay: app.NextRetryDelay(),
		Category:       app.Category(),
	})
}
