// Package logging builds the one logger every turnstile binary uses: zap,
// as JSON lines (for log collectors and the crash tests, which read every
// line) or as console text (for a person at a terminal).
package logging

import (
	"fmt"
	"io"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Formats of a logger.
const (
	FormatJSON    = "json"
	FormatConsole = "console"
)

// Defaults of every binary.
const (
	DefaultLevel  = "info"
	DefaultFormat = FormatJSON
)

// New builds a logger writing to w at level (debug, info, warn, error) in
// format (json or console), without sampling, so a crash test reading the
// log sees every line.
func New(w io.Writer, level, format string) (*zap.Logger, error) {
	lvl, err := zap.ParseAtomicLevel(strings.ToLower(level))
	if err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	var enc zapcore.Encoder
	switch format {
	case FormatJSON:
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case FormatConsole:
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("log format %q: want %s or %s", format, FormatJSON, FormatConsole)
	}
	sink := zapcore.Lock(zapcore.AddSync(w))
	return zap.New(zapcore.NewCore(enc, sink, lvl), zap.AddCaller(), zap.ErrorOutput(sink)), nil
}
