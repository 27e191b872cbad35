package trainer

import (
	"errors"
	"strings"

	"go.temporal.io/sdk/temporal"
)

// CauseFirstError is a failed workflow's error as an operator reads it: the
// root cause first (the innermost application error, e.g. "checkpoint k1:
// agents: …: listed in the manifest but missing"), then where it happened
// ("restore of checkpoint k1 failed in phase validate: validate checkpoint;
// nothing was touched"). Temporal's own wrapping ("workflow execution
// error …", "activity error (type: …, scheduledEventID: …)") is left out
// of the message and kept in Unwrap, for --log-level debug.
type CauseFirstError struct {
	Cause, Context string
	Err            error
}

func (e *CauseFirstError) Error() string {
	if e.Context == "" {
		return e.Cause
	}
	return e.Cause + " (" + e.Context + ")"
}

func (e *CauseFirstError) Unwrap() error { return e.Err }

// causeFirst turns err into a CauseFirstError when it holds application
// errors; any other error is returned as it is.
func causeFirst(err error) error {
	var apps []*temporal.ApplicationError
	for e := err; e != nil; e = errors.Unwrap(e) {
		if app, ok := e.(*temporal.ApplicationError); ok {
			apps = append(apps, app)
		}
	}
	if len(apps) == 0 {
		return err
	}
	root := apps[len(apps)-1].Message()
	if len(apps) == 1 {
		return &CauseFirstError{Cause: root, Err: err}
	}
	return &CauseFirstError{Cause: root, Context: whereItFailed(apps[0].Message(), root), Err: err}
}

// whereItFailed is the outer message without what it repeats: the root cause and
// the SDK's description of the activity that failed. A trailing
// parenthesised hint ("(nothing was touched)") is kept.
func whereItFailed(outer, root string) string {
	var hint string
	if i := strings.LastIndex(outer, " ("); i >= 0 && strings.HasSuffix(outer, ")") && !strings.Contains(outer[i:], root) {
		outer, hint = outer[:i], strings.TrimSuffix(outer[i+2:], ")")
	}
	for _, cut := range []string{": activity error (", ": " + root} {
		if i := strings.Index(outer, cut); i >= 0 {
			outer = outer[:i]
		}
	}
	if hint != "" {
		return outer + "; " + hint
	}
	return outer
}
