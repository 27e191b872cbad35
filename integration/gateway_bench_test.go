package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/gateway"
	"github.com/turnstile-rl/turnstile/internal/bench"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// BenchmarkGatewayFeed measures the results feed on the real stack: a set
// of 1,000 rollouts holding their results for acknowledgement is consumed
// through a gateway process, page by page, each page acknowledged before
// the next is asked for, as a trainer does. Two baselines are measured in
// the same run: the same pages consumed in-process through the client
// library (trainer.Feed and trainer.Acknowledge, no HTTP, no gateway) over
// 100 more held results of the set, and a pass over the 1,000 that only
// reads the feed by cursor (nothing acknowledged). It reports results/s of
// each and the ratios, and the gateway's peak resident memory (VmHWM) and
// the highest RSS sampled while it served.
//
//	go test -run '^$' -bench BenchmarkGatewayFeed -benchtime 1x ./integration
//
// Each iteration prepares its own set (minutes on two cores); -benchtime 1x
// is the intended use. TURNSTILE_BENCH_HELD changes the 1,000.
func BenchmarkGatewayFeed(b *testing.B) {
	const page, direct = 100, 100
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("TURNSTILE_BENCH_HELD")); err == nil && v > 0 {
		n = v
	}
	c := newCluster(b)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer()
	c.startWorker()
	gp, base := c.startGateway("127.0.0.1:0", "--feed-settle", "0s")
	g := gw{t: b, base: base, token: gatewayToken}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	for i := range b.N {
		set := fmt.Sprintf("bench%d", i)
		b.StopTimer()
		prepareHeld(ctx, b, c, g, set, n+direct)
		directRate := consumeDirect(ctx, b, c, set, direct, page)
		rss := watchRSS(gp.cmd.Process.Pid)
		b.StartTimer()

		start := time.Now()
		read := consumeFeed(ctx, b, g, set, n, page, false)
		readRate := float64(read) / time.Since(start).Seconds()
		start = time.Now()
		acked := consumeFeed(ctx, b, g, set, n, page, true)
		ackRate := float64(acked) / time.Since(start).Seconds()

		b.StopTimer()
		peakSampled := rss.stop()
		require.Equal(b, n, read)
		require.Equal(b, n, acked)
		hwm := procStatusKB(gp.cmd.Process.Pid, "VmHWM")
		b.ReportMetric(ackRate, "results/s")
		b.ReportMetric(readRate, "read-only-results/s")
		b.ReportMetric(ackRate/readRate, "ratio-vs-read-only")
		b.ReportMetric(directRate, "client-library-results/s")
		b.ReportMetric(ackRate/directRate, "ratio-vs-client-library")
		b.ReportMetric(float64(peakSampled)/1024, "gateway-rss-MB")
		b.ReportMetric(float64(hwm)/1024, "gateway-peak-rss-MB")
		b.Logf("%d held results: delivered+acknowledged %.1f/s, read-only %.1f/s (ratio %.2f), client library in-process %.1f/s (ratio %.2f); gateway RSS peak %.1f MB sampled, VmHWM %.1f MB",
			n, ackRate, readRate, ackRate/readRate, directRate, ackRate/directRate, float64(peakSampled)/1024, float64(hwm)/1024)
	}
}

// prepareHeld submits n quick rollouts through the gateway and waits until
// every one holds its result.
func prepareHeld(ctx context.Context, b *testing.B, c *cluster, g gw, set string, n int) {
	b.Helper()
	status, raw := g.do(ctx, "POST", "/v1/sets", gateway.SubmitRequest{RequestID: "s-" + set, Set: set, Envs: []string{"counter"}, Count: n, MaxTurns: 4}, nil)
	require.Equal(b, http.StatusOK, status, "%s", raw)
	c.waitFor(fmt.Sprintf("%d held results", n), nil, 20*time.Minute, func() bool {
		var s gateway.SetResponse
		status, _ := g.do(ctx, "GET", "/v1/sets/"+set, nil, &s)
		return status == http.StatusOK && s.Health.Held == n
	})
}

// consumeFeed reads n results of set's feed, page by page; with ack it
// acknowledges each page before asking for the next (then the feed needs
// no cursor: acknowledged results leave it), without, it follows the
// cursor. It returns the distinct results read.
func consumeFeed(ctx context.Context, b *testing.B, g gw, set string, n, page int, ack bool) int {
	b.Helper()
	seen := map[string]bool{}
	cursor := ""
	var feedTime, ackTime time.Duration
	polls, acks := 0, 0
	defer func() {
		b.Logf("ack=%v: %d feed polls, %s each; %d acknowledgements, %s each", ack, polls, feedTime/time.Duration(max(polls, 1)), acks, ackTime/time.Duration(max(acks, 1)))
	}()
	for len(seen) < n && ctx.Err() == nil {
		began := time.Now()
		p := g.feed(ctx, set, cursor, page, 1000)
		feedTime += time.Since(began)
		polls++
		for _, it := range p.Items {
			require.False(b, seen[it.RolloutID], "rollout %s delivered twice", it.RolloutID)
			seen[it.RolloutID] = true
		}
		if !ack {
			cursor = p.Cursor
		} else if len(p.Items) > 0 {
			began := time.Now()
			g.ack(ctx, set, "ack-"+p.Items[0].RolloutID, p.Items)
			ackTime += time.Since(began)
			acks++
		}
	}
	return len(seen)
}

// consumeDirect consumes n held results of set in-process through the
// client library (the bench's consumer: health, feed page, acknowledgement
// per page), pages of page acknowledged one by one, and returns the
// results/s.
func consumeDirect(ctx context.Context, b *testing.B, c *cluster, set string, n, page int) float64 {
	b.Helper()
	store, err := transcriptstore.Open(c.store)
	require.NoError(b, err)
	start := time.Now()
	pt, err := bench.ConsumeInProcess(ctx, trainer.New(c.client, rollout.TaskQueue), store, set, n, page)
	require.NoError(b, err)
	rate := float64(n) / time.Since(start).Seconds()
	per := func(d time.Duration) time.Duration {
		return (d / time.Duration(max(pt.Pages, 1))).Round(time.Millisecond)
	}
	b.Logf("client library, per page of %d: feed %s, health %s, acknowledge %s", page, per(pt.Feed), per(pt.Health), per(pt.Acknow))
	return rate
}

// rssWatch samples a process's resident memory until stopped.
type rssWatch struct {
	done chan struct{}
	wg   sync.WaitGroup
	peak atomic.Int64
}

func watchRSS(pid int) *rssWatch {
	w := &rssWatch{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if kb := procStatusKB(pid, "VmRSS"); kb > w.peak.Load() {
				w.peak.Store(kb)
			}
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the sampling and returns the highest RSS seen, in KiB.
func (w *rssWatch) stop() int64 {
	close(w.done)
	w.wg.Wait()
	return w.peak.Load()
}

// procStatusKB reads a "kB" field of /proc/<pid>/status (0 when absent).
func procStatusKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
