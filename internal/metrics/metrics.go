// Package metrics serves Prometheus metrics: one registry per process,
// served at /metrics on a listener of its own (off unless an address is
// given), and the Temporal SDK's metrics routed into the same registry
// through its tally contrib. The metric names of each binary are listed in
// the README.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	sdkmetrics "go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"

	"github.com/turnstile-rl/turnstile/internal/httpserver"
)

// Path is where every binary serves its metrics.
const Path = "/metrics"

// Namespace prefixes turnstile's own metric names.
const Namespace = "turnstile"

// NewRegistry returns a registry holding the Go runtime and process
// collectors, like the default one, but owned by the caller.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Serve listens on addr and serves reg at Path until ctx is done, with the
// binary's HTTP timeouts. It returns the address it listens on (port 0
// picks one) once listening; serving errors after that are passed to
// onError.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, timeouts httpserver.Timeouts, onError func(error)) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := timeouts.Server(mux)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && onError != nil {
			onError(fmt.Errorf("metrics: serve on %s: %w", ln.Addr(), err))
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr().String(), nil
}

// sdkReportEvery is how often the SDK's tally scope flushes into the
// registry.
const sdkReportEvery = time.Second

// SDKHandler routes the Temporal SDK's metrics (temporal_*: task slots,
// poll results, schedule-to-start latency, sticky cache, …) into reg, with
// Prometheus names (counters end in _total, timers are histograms in
// seconds). Set it as client.Options.MetricsHandler; call close when the
// client is closed.
func SDKHandler(reg *prometheus.Registry) (handler sdkmetrics.MetricsHandler, closeFn func() error, err error) {
	reporter, err := tallyprom.Configuration{TimerType: "histogram"}.NewReporter(tallyprom.ConfigurationOptions{
		Registry: reg,
		OnError:  func(error) {}, // a clashing registration drops that one metric, nothing else
	})
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: SDK reporter: %w", err)
	}
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
	}, sdkReportEvery)
	return sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)), closer.Close, nil
}

// InstrumentHandler counts and times the requests next serves, as
// <namespace>_<subsystem>_request_seconds{route, code}: route is the
// ServeMux pattern that matched (a bounded set; "" for none), code the
// status class (2xx, 4xx, 5xx).
func InstrumentHandler(reg prometheus.Registerer, subsystem string, next http.Handler) http.Handler {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: "request_seconds",
		Help:    "Time to serve a request, by matched route and status class.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"route", "code"})
	reg.MustRegister(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		// ServeMux sets r.Pattern on the request it was given.
		h.WithLabelValues(r.Pattern, fmt.Sprintf("%dxx", sw.status/100)).Observe(time.Since(start).Seconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Flush passes a flush on, for streamed answers.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Func is one metric read from a function at scrape time.
type Func struct {
	Name, Help string
	Counter    bool // a counter (else a gauge)
	Value      func() float64
}

// RegisterFuncs registers fs under Namespace and subsystem.
func RegisterFuncs(reg prometheus.Registerer, subsystem string, fs ...Func) {
	for _, f := range fs {
		if f.Counter {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Subsystem: subsystem, Name: f.Name, Help: f.Help}, f.Value))
		} else {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: subsystem, Name: f.Name, Help: f.Help}, f.Value))
		}
	}
}

// maxScrape bounds what Fetch reads: a process's metrics page is tens of
// kilobytes.
const maxScrape = 16 << 20

// Fetch reads a Prometheus text endpoint (another process's /metrics)
// within timeout, for the harnesses that sample them (the soak, the bench).
func Fetch(ctx context.Context, url string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxScrape))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return b, nil
}
