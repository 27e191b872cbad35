package logging_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/internal/logging"
)

func TestNewWritesTheFormatAsked(t *testing.T) {
	var js strings.Builder
	l, err := logging.New(&js, "info", logging.FormatJSON)
	require.NoError(t, err)
	l.Debug("hidden")
	l.Info("served", zap.String("model", "m1"))
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(js.String())), &line), "one JSON line, debug left out: %s", js.String())
	require.Equal(t, "served", line["msg"])
	require.Equal(t, "m1", line["model"])

	var text strings.Builder
	l, err = logging.New(&text, "debug", logging.FormatConsole)
	require.NoError(t, err)
	l.Debug("shown", zap.Int("n", 3))
	require.Contains(t, text.String(), "shown")
	require.False(t, json.Valid([]byte(strings.TrimSpace(text.String()))), "console text, not JSON")
}

func TestNewRefusesBadSettings(t *testing.T) {
	_, err := logging.New(&strings.Builder{}, "loud", logging.FormatJSON)
	require.ErrorContains(t, err, `log level "loud"`)
	_, err = logging.New(&strings.Builder{}, "info", "xml")
	require.ErrorContains(t, err, `log format "xml": want json or console`)
}
