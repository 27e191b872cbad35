// Package httpserver builds the HTTP servers of turnstile's binaries (the
// gateway, the environment server, the policy server and every metrics
// listener) with all four of net/http's timeouts set, so no client holds
// a connection, a goroutine or a request body open for longer than the
// operator allows: an idle keep-alive connection is closed after Idle, a
// request (headers and body) must arrive within Read, and an answer must
// be written within Write. A route that waits on purpose (a long poll) or
// streams moves its own write deadline with ExtendWrite.
package httpserver

import (
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Environment variables every binary reads its HTTP timeouts from (the
// flags of the same name, --http-read-timeout …, override them).
const (
	EnvReadHeaderTimeout = "TURNSTILE_HTTP_READ_HEADER_TIMEOUT"
	EnvReadTimeout       = "TURNSTILE_HTTP_READ_TIMEOUT"
	EnvWriteTimeout      = "TURNSTILE_HTTP_WRITE_TIMEOUT"
	EnvIdleTimeout       = "TURNSTILE_HTTP_IDLE_TIMEOUT"
)

// Defaults of Timeouts. Write covers the slowest answer a route gives
// without moving its own deadline (an environment step of a remote
// environment, 60 s at most by default; a set summary over visibility).
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultWriteTimeout      = 2 * time.Minute
	DefaultIdleTimeout       = time.Minute
)

// Timeouts are the four timeouts of an http.Server.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers.
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included: a body trickled
	// slower than that is cut off.
	Read time.Duration
	// Write bounds the time from the end of a request's headers to the end
	// of its answer.
	Write time.Duration
	// Idle bounds how long a keep-alive connection waits for its next
	// request.
	Idle time.Duration
}

// Defaults returns the default timeouts.
func Defaults() Timeouts {
	return Timeouts{ReadHeader: DefaultReadHeaderTimeout, Read: DefaultReadTimeout, Write: DefaultWriteTimeout, Idle: DefaultIdleTimeout}
}

// setting is one timeout with its variable and flag.
type setting struct {
	env, flag, meaning string
	dst                *time.Duration
}

func (t *Timeouts) settings() []setting {
	return []setting{
		{EnvReadHeaderTimeout, "http-read-header-timeout", "bound on reading a request's headers", &t.ReadHeader},
		{EnvReadTimeout, "http-read-timeout", "bound on reading a whole request, body included", &t.Read},
		{EnvWriteTimeout, "http-write-timeout", "bound on writing an answer (long polls and streams extend their own)", &t.Write},
		{EnvIdleTimeout, "http-idle-timeout", "how long an idle keep-alive connection stays open", &t.Idle},
	}
}

// FromLookup returns the defaults overridden by the environment (lookup is
// os.LookupEnv, or a map in tests).
func FromLookup(lookup func(string) (string, bool)) (Timeouts, error) {
	t := Defaults()
	for _, s := range t.settings() {
		v, ok := lookup(s.env)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d <= 0 {
			return Timeouts{}, fmt.Errorf("%s=%q: want a positive Go duration such as 30s or 2m", s.env, v)
		}
		*s.dst = d
	}
	return t, nil
}

// AddFlags registers --http-read-header-timeout, --http-read-timeout,
// --http-write-timeout and --http-idle-timeout on fs, defaulting to t's
// current values.
func (t *Timeouts) AddFlags(fs *flag.FlagSet) {
	for _, s := range t.settings() {
		fs.DurationVar(s.dst, s.flag, *s.dst, s.meaning+"; default from $"+s.env)
	}
}

// Validate reports a timeout that is not positive, naming its setting.
func (t Timeouts) Validate() error {
	for _, s := range t.settings() {
		if *s.dst <= 0 {
			return fmt.Errorf("--%s (or $%s) %s: want a positive duration", s.flag, s.env, *s.dst)
		}
	}
	if t.ReadHeader > t.Read {
		return fmt.Errorf("--http-read-header-timeout %s is longer than --http-read-timeout %s, which includes it", t.ReadHeader, t.Read)
	}
	return nil
}

// Setting is one environment variable of Timeouts, for a binary's usage
// text.
type Setting struct{ Env, Default, Meaning string }

// Settings lists the variables Timeouts are read from.
func Settings() []Setting {
	d := Defaults()
	var out []Setting
	for _, s := range d.settings() {
		out = append(out, Setting{Env: s.env, Default: s.dst.String(), Meaning: s.meaning})
	}
	return out
}

// Server is an http.Server serving h with t's timeouts (zero ones take
// their defaults).
func (t Timeouts) Server(h http.Handler) *http.Server {
	d := Defaults()
	pick := func(v, def time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return def
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: pick(t.ReadHeader, d.ReadHeader),
		ReadTimeout:       pick(t.Read, d.Read),
		WriteTimeout:      pick(t.Write, d.Write),
		IdleTimeout:       pick(t.Idle, d.Idle),
	}
}

// ExtendWrite moves the write deadline of w's connection to until: a long
// poll that waits until some time, or a stream that has made progress,
// calls it so the server's write timeout counts from there. A zero until
// does nothing, and so does a writer that cannot move its deadline (a test
// recorder: http.ErrNotSupported).
func ExtendWrite(w http.ResponseWriter, until time.Time) {
	if !until.IsZero() {
		_ = http.NewResponseController(w).SetWriteDeadline(until)
	}
}
