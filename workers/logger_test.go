package workers_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/turnstile-rl/turnstile/workers"
)

func zaptestLogger(t *testing.T) *zap.Logger { return zaptest.NewLogger(t) }

func TestLoggerLevelsAndFields(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	var l log.Logger = workers.NewLogger(zap.New(core))

	boom := errors.New("boom")
	l.Debug("d", "k", 1)
	l.Info("i", "k", "v")
	l.Warn("w", 7, true)                  // non-string key is formatted
	l.Error("e", "err", boom, "dangling") // odd count keeps the key
	tests := []struct {
		msg    string
		level  zapcore.Level
		fields map[string]any
	}{
		{"d", zapcore.DebugLevel, map[string]any{"k": int64(1)}},
		{"i", zapcore.InfoLevel, map[string]any{"k": "v"}},
		{"w", zapcore.WarnLevel, map[string]any{"7": true}},
		{"e", zapcore.ErrorLevel, map[string]any{"err": "boom", "dangling": "(MISSING)"}},
	}
	entries := logs.AllUntimed()
	require.Len(t, entries, len(tests), "got %d entries, want %d", len(entries), len(tests))
	for i, tt := range tests {
		e := entries[i]
		require.Equal(t, tt.msg, e.Message, "entry %d: %s %q, want %s %q", i, e.Level, e.Message, tt.level, tt.msg)
		require.Equal(t, tt.level, e.Level, "entry %d: %s %q, want %s %q", i, e.Level, e.Message, tt.level, tt.msg)
		got := e.ContextMap()
		for k, v := range tt.fields {
			assert.True(t, got[k] == v, "entry %q field %q = %#v, want %#v", tt.msg, k, got[k], v)
		}
	}
}

func TestLoggerWithDoesNotMutate(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	base := workers.NewLogger(zap.New(core))
	child := log.With(base, "rollout", "s-0001")
	require.IsType(t, &workers.Logger{}, child, "log.With did not use the adapter's With")
	child.Info("child")
	base.Info("base")
	skipped := log.Skip(base, 1)
	skipped.Info("skipped", "a", "b")

	entries := logs.AllUntimed()
	require.Len(t, entries, 3, "got %d entries", len(entries))
	assert.Equal(t, "s-0001", entries[0].ContextMap()["rollout"], "child lacks its field: %v", entries[0].ContextMap())
	_, ok := entries[1].ContextMap()["rollout"]
	assert.False(t, ok, "With mutated the base logger: %v", entries[1].ContextMap())
	assert.Equal(t, "b", entries[2].ContextMap()["a"], "skip logger lost fields: %v", entries[2].ContextMap())
}
