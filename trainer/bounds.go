package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Bounds of the strings and sizes of a request, checked before anything is
// sent to Temporal: what would exceed them is a mistake (or an attack),
// and Temporal would refuse it anyway, as a payload over its blob size
// limit (2 MiB by default) or a gRPC message over its maximum (4 MiB),
// after part of a set had started.
const (
	// MaxModelNameLen bounds a policy's model name.
	MaxModelNameLen = 256
	// MaxURLLen bounds a model, environment or participant URL.
	MaxURLLen = 2048
	// MaxEnvListLen bounds the comma-separated list of environments.
	MaxEnvListLen = 4096
	// MaxStopLen bounds one stop sequence of the sampling parameters.
	MaxStopLen = 256
	// MaxTaskBytes bounds a dataset row's task (JSON).
	MaxTaskBytes = 256 << 10
	// MaxParticipants bounds the environment servers of a checkpoint,
	// restore or resume.
	MaxParticipants = 1024
	// MaxInputBytes bounds one rollout's encoded input: well below
	// Temporal's blob size limit, so its history stays small too.
	MaxInputBytes = 512 << 10
)

// checkLen refuses a string longer than max, naming what it is without
// repeating it.
func checkLen(what, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%s: %d bytes, more than the %d it may have", what, len(v), max)
	}
	return nil
}

// checkSampling is rollout.Sampling's own check plus the bound on stop
// sequences (the workflow checks the rest again; this one is the
// submitter's).
func checkSampling(s *rollout.Sampling) error {
	if s == nil {
		return nil
	}
	for i, st := range s.Stop {
		if err := checkLen(fmt.Sprintf("sampling.stop[%d]", i), st, MaxStopLen); err != nil {
			return err
		}
	}
	return s.Validate()
}

// checkParticipantBounds refuses too many participants or one too long a
// URL, before the URLs are parsed.
func checkParticipantBounds(urls []string) error {
	if len(urls) > MaxParticipants {
		return fmt.Errorf("--participants: %d environment servers, more than %d", len(urls), MaxParticipants)
	}
	for i, u := range urls {
		if err := checkLen(fmt.Sprintf("--participants: participant %d", i), u, MaxURLLen); err != nil {
			return err
		}
	}
	return nil
}

// checkInputSize refuses a rollout input whose encoding is larger than
// MaxInputBytes: the backstop of the field bounds.
func checkInputSize(in rollout.Input) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("rollout %s: encode its input: %w", in.RolloutID, err)
	}
	if len(b) > MaxInputBytes {
		return fmt.Errorf("rollout %s: its input is %d bytes, more than the %d a rollout's input may have (its task: %d bytes)",
			in.RolloutID, len(b), MaxInputBytes, len(in.Task))
	}
	return nil
}

// IsRequestTooLarge reports whether err is Temporal refusing a request as
// too large: a payload over its blob size limit (InvalidArgument "Blob data
// size exceeds limit"), or a gRPC message over the frontend's maximum
// (ResourceExhausted "… larger than max …"). Repeating such a request
// cannot succeed, unlike a ResourceExhausted that is rate limiting.
func IsRequestTooLarge(err error) bool {
	if err == nil {
		return false
	}
	var ia *serviceerror.InvalidArgument
	if errors.As(err, &ia) && containsFold(ia.Error(), "size exceeds") {
		return true
	}
	var re *serviceerror.ResourceExhausted
	if errors.As(err, &re) {
		return containsFold(re.Error(), "larger than max")
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.ResourceExhausted {
		return containsFold(st.Message(), "larger than max")
	}
	return false
}

// containsFold reports whether s contains sub, ignoring case.
func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
