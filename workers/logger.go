package workers

import (
	"fmt"

	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
)

// Logger adapts a zap logger to the Temporal SDK's log.Logger, so the SDK's
// own messages (poller errors, activity retries, workflow panics) land in the
// same structured log as ours.
type Logger struct {
	zl *zap.Logger
}

// The SDK discovers these optional interfaces by type assertion.
var (
	_ log.Logger          = (*Logger)(nil)
	_ log.WithLogger      = (*Logger)(nil)
	_ log.WithSkipCallers = (*Logger)(nil)
)

// NewLogger wraps zl. The extra caller skip makes zap report the SDK's call
// site, not this adapter.
func NewLogger(zl *zap.Logger) *Logger {
	return &Logger{zl: zl.WithOptions(zap.AddCallerSkip(1))}
}

// Debug logs at debug level; keyvals alternate keys and values.
func (l *Logger) Debug(msg string, keyvals ...any) { l.zl.Debug(msg, fields(keyvals)...) }

// Info logs at info level.
func (l *Logger) Info(msg string, keyvals ...any) { l.zl.Info(msg, fields(keyvals)...) }

// Warn logs at warn level.
func (l *Logger) Warn(msg string, keyvals ...any) { l.zl.Warn(msg, fields(keyvals)...) }

// Error logs at error level.
func (l *Logger) Error(msg string, keyvals ...any) { l.zl.Error(msg, fields(keyvals)...) }

// With returns a logger that adds keyvals to every entry; l is unchanged.
func (l *Logger) With(keyvals ...any) log.Logger {
	return &Logger{zl: l.zl.With(fields(keyvals)...)}
}

// WithCallerSkip returns a logger that skips depth more stack frames when
// reporting the caller; l is unchanged.
func (l *Logger) WithCallerSkip(depth int) log.Logger {
	return &Logger{zl: l.zl.WithOptions(zap.AddCallerSkip(depth))}
}

// missingValue stands in for the value of a trailing key without one, so a
// malformed call still logs everything it was given.
const missingValue = "(MISSING)"

// fields turns alternating keys and values into zap fields. A key that is not
// a string is formatted; zap.Any picks the right encoding for errors,
// durations, stringers and the rest.
func fields(keyvals []any) []zap.Field {
	if len(keyvals) == 0 {
		return nil
	}
	out := make([]zap.Field, 0, (len(keyvals)+1)/2)
	for i := 0; i < len(keyvals); i += 2 {
		key, ok := keyvals[i].(string)
		if !ok {
			key = fmt.Sprint(keyvals[i])
		}
		if i+1 == len(keyvals) {
			out = append(out, zap.String(key, missingValue))
			break
		}
		out = append(out, zap.Any(key, keyvals[i+1]))
	}
	return out
}
