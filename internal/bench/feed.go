package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/gateway"
	"github.com/turnstile-rl/turnstile/internal/cpuprofile"
	"github.com/turnstile-rl/turnstile/internal/fanout"
	procs "github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Feed is the trainer's side: results delivered and acknowledged per
// second, a page at a time, on the same server, each way after the
// rollouts the one before acknowledged were released: through a gateway process
// (HTTP), each page acknowledged before the next is asked for, and again
// acknowledging each page while reading the next (the cursor carries the
// position, so a trainer need not wait for the acknowledgement);
// in-process through the client library (trainer.Feed and
// trainer.Acknowledge); and a plain loop of Temporal updates (one update
// per result to a workflow holding it, FeedUpdateConcurrency at once: the
// floor of "one workflow update per acknowledged result").
type Feed struct {
	Held int `json:"held"`
	Page int `json:"page"`
	// ResultsPerSec: Turnstile through the gateway, Lean the plain update
	// loop; Pipelined through the gateway acknowledging while reading on;
	// InProcess the client library.
	ResultsPerSec Pair    `json:"results_per_s"`
	Pipelined     float64 `json:"pipelined_results_per_s"`
	InProcess     float64 `json:"in_process_results_per_s"`
}

// FeedUpdateConcurrency is how many updates the plain loop has in flight.
const FeedUpdateConcurrency = 16

// feedSettle is the gateway's --feed-settle: the bench's results are
// final, so the feed need not wait for visibility to settle.
const feedSettle = "0s"

// gatewayToken and gatewayOperatorToken are the bench gateway's bearer
// tokens (its stack is private).
const (
	gatewayToken         = "bench-gateway-trainer-token"
	gatewayOperatorToken = "bench-gateway-operator-token"
)

// feed measures the ways of consuming s.cfg.FeedHeld held results.
func (s *stack) feed(ctx context.Context, stamp string) (*Feed, error) {
	out := &Feed{Held: s.cfg.FeedHeld, Page: s.cfg.FeedPage}
	gw, base, err := s.startGateway(ctx)
	if err != nil {
		return nil, err
	}
	g := gatewayClient{base: base, token: gatewayToken}
	cpu := func() cpuSample {
		c := s.sampleCPU(s.worker)
		c["gateway"], c["bench"] = gw.CPU(), selfCPU()
		return c
	}
	n := s.cfg.FeedHeld
	// The sets of each way, prepared together.
	viaGateway, pipelined, direct := "feedgw-"+stamp, "feedpipe-"+stamp, "feeddirect-"+stamp
	for _, set := range []string{viaGateway, pipelined, direct} {
		if err := g.submit(ctx, set, n); err != nil {
			return nil, err
		}
	}
	for _, set := range []string{viaGateway, pipelined, direct} {
		if err := s.awaitHeld(ctx, g, set, n); err != nil {
			return nil, err
		}
	}
	s.logf("feed: %d held results in each of three sets; consuming", n)
	for _, way := range []struct {
		set, label string
		pipelined  bool
		rate       *float64
	}{{viaGateway, "feed through the gateway", false, &out.ResultsPerSec.Turnstile},
		{pipelined, "feed through the gateway, acknowledging while reading on", true, &out.Pipelined}} {
		mark, before, t0 := s.markMetrics(ctx, way.label), cpu(), time.Now()
		pt, err := g.consume(ctx, way.set, n, s.cfg.FeedPage, way.pipelined)
		if err != nil {
			return nil, err
		}
		*way.rate = float64(n) / time.Since(t0).Seconds()
		s.logCores(way.label, before, cpu(), time.Since(t0))
		mark.end(ctx)
		s.logPageTimes(way.label, pt)
		if err := s.awaitReleased(ctx, g, way.label, way.set); err != nil {
			return nil, err
		}
	}
	mark, before, t0 := s.markMetrics(ctx, "feed in process"), cpu(), time.Now()
	if out.InProcess, err = s.consumeDirect(ctx, direct, n, s.cfg.FeedPage); err != nil {
		return nil, err
	}
	s.logCores("feed in process", before, cpu(), time.Since(t0))
	mark.end(ctx)
	if err := s.awaitReleased(ctx, g, "feed in process", direct); err != nil {
		return nil, err
	}
	mark = s.markMetrics(ctx, "feed by a plain update loop")
	if out.ResultsPerSec.Lean, err = s.updateLoop(ctx, "feedloop-"+stamp, n); err != nil {
		return nil, err
	}
	mark.end(ctx)
	s.logf("feed: %.1f results/s through the gateway (%.1f acknowledging while reading on), %.1f in process, %.1f by a plain update loop",
		out.ResultsPerSec.Turnstile, out.Pipelined, out.InProcess, out.ResultsPerSec.Lean)
	return out, nil
}

// logCores logs the cores each process used between two samples.
func (s *stack) logCores(label string, before, after cpuSample, wall time.Duration) {
	names := make([]string, 0, len(after))
	for name := range after {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(after[name]-before[name])/float64(wall)))
	}
	s.logf("%s: cores used over %s: %s", label, wall.Round(time.Millisecond), strings.Join(parts, ", "))
}

// selfCPU is this process's CPU time (user and system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// logPageTimes logs where a consumer's time went, per page.
func (s *stack) logPageTimes(label string, pt PageTimes) {
	if pt.Pages == 0 {
		return
	}
	per := func(d time.Duration) time.Duration { return (d / time.Duration(pt.Pages)).Round(time.Millisecond) }
	s.logf("%s: %d pages, per page: health %s, feed %s, acknowledge %s", label, pt.Pages, per(pt.Health), per(pt.Feed), per(pt.Acknow))
}

// startGateway starts a gateway process over the stack's server and
// returns it and its base URL.
func (s *stack) startGateway(ctx context.Context) (*procs.Proc, string, error) {
	env := []string{
		"TEMPORAL_ADDRESS=" + s.hostPort, "TEMPORAL_NAMESPACE=default",
		"TURNSTILE_TRANSCRIPT_DIR=" + s.store, "TURNSTILE_CONTROL_TOKEN=" + s.token,
		"TURNSTILE_ENV_URL=" + s.envURL, "TURNSTILE_MODEL_BASE_URL=" + s.policyURL,
		"TURNSTILE_ALLOWED_PARTICIPANTS=" + procs.Loopback, "TURNSTILE_ALLOWED_MODEL_URLS=" + procs.Loopback,
	}
	args := []string{"--addr", "127.0.0.1:0", "--token", gatewayToken, "--operator-token", gatewayOperatorToken,
		"--checkpoint-root", filepath.Join(s.cfg.OutDir, "checkpoints"), "--log-level", "warn", "--feed-settle", feedSettle}
	p, base, err := s.launch.StartServer(ctx, "gateway", filepath.Join(s.cfg.BinDir, "gateway"), args, env,
		func(base string) string { return base + "/healthz" }, readyTimeout)
	if err != nil {
		return nil, "", fmt.Errorf("start the gateway: %w", err)
	}
	return p, base, nil
}

// awaitHeld waits until every one of set's n rollouts holds its result.
func (s *stack) awaitHeld(ctx context.Context, g gatewayClient, set string, n int) error {
	h, err := g.awaitHealth(ctx, set, time.Second, func(h gateway.Health) bool { return h.Held >= n })
	if err != nil {
		return fmt.Errorf("feed: %d of %d results of %s held: %w", h.Held, n, set, err)
	}
	return nil
}

// awaitReleased waits until every rollout of set has been released and
// closed after its acknowledgement (the set's acknowledgement ledger does
// that off the trainer's path), so that the next row does not share the
// server with this one's releases; it logs how long that took.
func (s *stack) awaitReleased(ctx context.Context, g gatewayClient, label, set string) error {
	t0 := time.Now()
	h, err := g.awaitHealth(ctx, set, 500*time.Millisecond, func(h gateway.Health) bool { return h.Running == 0 })
	if err != nil {
		return fmt.Errorf("%s: %d rollouts of %s not released: %w", label, h.Running, set, err)
	}
	s.logf("%s: every rollout released and closed %s after the last acknowledgement", label, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// awaitHealth reads set's health every interval until done says so (or
// restoreTimeout passes) and returns the last one read.
func (g gatewayClient) awaitHealth(ctx context.Context, set string, every time.Duration, done func(gateway.Health) bool) (gateway.Health, error) {
	var h gateway.Health
	err := waitUntil(ctx, restoreTimeout, every, func() (bool, error) {
		var r gateway.SetResponse
		if err := g.call(ctx, http.MethodGet, "/v1/sets/"+set, nil, &r); err != nil {
			return false, err
		}
		h = r.Health
		return done(h), nil
	})
	return h, err
}

// consumeDirect consumes n held results of set in process through the
// client library, as a trainer linking it would, and returns results/s.
func (s *stack) consumeDirect(ctx context.Context, set string, n, page int) (float64, error) {
	store, err := transcriptstore.Open(s.store)
	if err != nil {
		return 0, err
	}
	if s.cfg.CPUProfile {
		// The client library's side of the feed runs in this process.
		stop, err := cpuprofile.Start(filepath.Join(s.cfg.OutDir, FeedProfileName))
		if err != nil {
			return 0, fmt.Errorf("feed profile: %w", err)
		}
		defer stop()
	}
	t0 := time.Now()
	pt, err := ConsumeInProcess(ctx, trainer.New(s.client, workerQueue), store, set, n, page)
	if err != nil {
		return 0, err
	}
	s.logPageTimes("feed in process", pt)
	return float64(n) / time.Since(t0).Seconds(), nil
}

// FeedProfileName is the CPU profile (with -cpuprofile) of the bench
// process while it consumes the feed in process: the client library's
// side of a page and an acknowledgement.
const FeedProfileName = "feed-in-process.pprof"

// PageTimes are the time a consumer spent per call kind over its pages.
type PageTimes struct {
	Pages                int
	Health, Feed, Acknow time.Duration
}

// ConsumeInProcess consumes n held results of set through the client
// library, as a trainer linking it would and as the gateway's feed does for
// its callers: the set's health every gateway.FeedHealthEvery, and per page of at most
// page results the feed page and one acknowledgement of the page before
// the next. It returns where the time went.
func ConsumeInProcess(ctx context.Context, tc *trainer.Client, store trainer.TranscriptReader, set string, n, page int) (PageTimes, error) {
	var pt PageTimes
	var after trainer.FeedPosition
	var healthAt time.Time
	for done := 0; done < n; {
		began := time.Now()
		if began.Sub(healthAt) >= gateway.FeedHealthEvery {
			if _, err := tc.Health(ctx, trainer.HealthRequest{Set: set, Window: 5 * time.Minute, Now: began}); err != nil {
				return pt, fmt.Errorf("health of %s: %w", set, err)
			}
			healthAt = began
			pt.Health += time.Since(began)
			began = time.Now()
		}
		p, err := tc.Feed(ctx, store, trainer.FeedRequest{Set: set, After: after, Max: min(page, n-done), Now: time.Now()})
		if err != nil {
			return pt, fmt.Errorf("feed of %s: %w", set, err)
		}
		after = p.Next // a trainer continues after what it got
		pt.Feed += time.Since(began)
		pt.Pages++
		lines, err := receiptLines(set, p.Items)
		if err != nil {
			return pt, err
		}
		if len(lines) == 0 {
			continue // not listed yet: the held results are all there, visibility lags
		}
		began = time.Now()
		if _, err := tc.Acknowledge(ctx, trainer.AckRequest{Set: set, Receipts: lines}); err != nil {
			return pt, fmt.Errorf("acknowledge %d of %s: %w", len(lines), set, err)
		}
		pt.Acknow += time.Since(began)
		done += len(lines)
	}
	return pt, nil
}

// receiptLines are the receipts of a feed page's items.
func receiptLines(set string, items []json.RawMessage) ([]trainer.ReceiptLine, error) {
	lines := make([]trainer.ReceiptLine, 0, len(items))
	for i, item := range items {
		var it struct {
			Receipt *rollout.Receipt `json:"receipt"`
		}
		if err := json.Unmarshal(item, &it); err != nil || it.Receipt == nil {
			return nil, fmt.Errorf("feed of %s: item %d has no receipt (%v)", set, i, err)
		}
		lines = append(lines, trainer.ReceiptLine{Line: i + 1, Receipt: *it.Receipt})
	}
	return lines, nil
}

// updateLoop starts n plain workflows each holding a result, waits until
// each has run its first task, then takes every result by one update per
// result (FeedUpdateConcurrency at once), and returns results/s.
func (s *stack) updateLoop(ctx context.Context, prefix string, n int) (float64, error) {
	ids := make([]string, n)
	err := fanout.Each(ctx, n, startConcurrency, func(ctx context.Context, i int) error {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
		_, err := s.client.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: ids[i], TaskQueue: floorQueue},
			FloorHeldWorkflowName, FloorHeldInput{Result: fmt.Sprintf(`{"rollout":%d,"reward":1}`, i), Bytes: LeanPayloadBytes})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("start the update loop's workflows: %w", err)
	}
	// Each answers a query once its first task ran: it holds its result.
	err = fanout.Each(ctx, n, startConcurrency, func(ctx context.Context, i int) error {
		_, err := s.client.QueryWorkflow(ctx, ids[i], "", FloorHeldQuery)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("the update loop's workflows: %w", err)
	}
	t0 := time.Now()
	err = fanout.Each(ctx, n, FeedUpdateConcurrency, func(ctx context.Context, i int) error {
		h, err := s.client.UpdateWorkflow(ctx, tclient.UpdateWorkflowOptions{
			WorkflowID: ids[i], UpdateName: FloorAckUpdate, WaitForStage: tclient.WorkflowUpdateStageCompleted,
		})
		if err != nil {
			return err
		}
		var res string
		return h.Get(ctx, &res)
	})
	if err != nil {
		return 0, fmt.Errorf("update loop: %w", err)
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// gatewayClient calls the bench's gateway.
type gatewayClient struct {
	base, token string
}

// submit submits n quick counter rollouts holding their results.
func (g gatewayClient) submit(ctx context.Context, set string, n int) error {
	var r gateway.SubmitResponse
	return g.call(ctx, http.MethodPost, "/v1/sets", gateway.SubmitRequest{
		RequestID: "bench-" + set, Set: set, Envs: []string{"counter"}, Count: n, MaxTurns: 4,
	}, &r)
}

// consume reads n results of set's feed page by page and acknowledges
// each page, as a trainer does: before asking for the next page, or, when
// pipelined, while reading the next (one acknowledgement in flight; the
// cursor carries the position, so the next page does not depend on it).
// It returns the time spent waiting on each call kind.
func (g gatewayClient) consume(ctx context.Context, set string, n, page int, pipelined bool) (PageTimes, error) {
	var pt PageTimes
	seen := map[string]bool{}
	cursor := ""
	acked := make(chan error, 1)
	acked <- nil // none in flight
	wait := func() error {
		began := time.Now()
		err := <-acked
		pt.Acknow += time.Since(began)
		return err
	}
	for len(seen) < n {
		began := time.Now()
		p, err := g.page(ctx, set, cursor, page)
		if err != nil {
			return pt, err
		}
		pt.Feed += time.Since(began)
		pt.Pages++
		cursor = p.Cursor
		if len(p.Items) == 0 {
			continue
		}
		ack := gateway.AckRequest{RequestID: "ack-" + p.Items[0].RolloutID}
		for _, it := range p.Items {
			if it.Receipt == nil || seen[it.RolloutID] {
				return pt, fmt.Errorf("feed of %s: item %s without a receipt or delivered twice", set, it.RolloutID)
			}
			seen[it.RolloutID] = true
			ack.Receipts = append(ack.Receipts, *it.Receipt)
		}
		if err := wait(); err != nil {
			return pt, err
		}
		go func() {
			var r gateway.AckResponse
			acked <- g.call(ctx, http.MethodPost, "/v1/sets/"+set+"/acks", ack, &r)
		}()
		if !pipelined {
			if err := wait(); err != nil {
				return pt, err
			}
			acked <- nil
		}
	}
	return pt, wait()
}

// feedPage is the part of a feed page the bench reads.
type feedPage struct {
	Cursor string `json:"cursor"`
	Items  []struct {
		RolloutID string           `json:"rollout_id"`
		Receipt   *gateway.Receipt `json:"receipt"`
	} `json:"items"`
}

// page reads the page of set's feed after cursor.
func (g gatewayClient) page(ctx context.Context, set, cursor string, max int) (feedPage, error) {
	var p feedPage
	q := url.Values{"max": {fmt.Sprint(max)}, "wait_ms": {"1000"}}
	if cursor != "" {
		q.Set("cursor", cursor) // a trainer continues after what it got
	}
	err := g.call(ctx, http.MethodGet, "/v1/sets/"+set+"/feed?"+q.Encode(), nil, &p)
	return p, err
}

// call sends a JSON request and decodes a 2xx answer into out.
func (g gatewayClient) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+g.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("gateway %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("gateway %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("gateway %s %s: %s: %s", method, path, resp.Status, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("gateway %s %s: decode the answer: %w", method, path, err)
	}
	return nil
}
