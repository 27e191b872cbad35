package workers_test

import (
	"errors"
	"testing"

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
	if len(entries) != len(tests) {
		t.Fatalf("got %d entries, want %d", len(entries), len(tests))
	}
	for i, tt := range tests {
		e := entries[i]
		if e.Message != tt.msg || e.Level != tt.level {
			t.Errorf("entry %d: %s %q, want %s %q", i, e.Level, e.Message, tt.level, tt.msg)
		}
		got := e.ContextMap()
		for k, v := range tt.fields {
			if got[k] != v {
				t.Errorf("entry %q field %q = %#v, want %#v", tt.msg, k, got[k], v)
			}
		}
	}
}

func TestLoggerWithDoesNotMutate(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	base := workers.NewLogger(zap.New(core))
	child := log.With(base, "rollout", "s-0001")
	if _, ok := child.(*workers.Logger); !ok {
		t.Fatalf("log.With did not use the adapter's With: got %T", child)
	}
	child.Info("child")
	base.Info("base")
	skipped := log.Skip(base, 1)
	skipped.Info("skipped", "a", "b")

	entries := logs.AllUntimed()
	if len(entries) != 3 {
		t.Fatalf("got %d entries", len(entries))
	}
	if entries[0].ContextMap()["rollout"] != "s-0001" {
		t.Errorf("child lacks its field: %v", entries[0].ContextMap())
	}
	if _, ok := entries[1].ContextMap()["rollout"]; ok {
		t.Errorf("With mutated the base logger: %v", entries[1].ContextMap())
	}
	if entries[2].ContextMap()["a"] != "b" {
		t.Errorf("skip logger lost fields: %v", entries[2].ContextMap())
	}
}
