package integration_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
)

// EnvBenchServerPIDs names extra processes whose CPU time the throughput
// benchmark reports as the Temporal side (the cluster's server and its
// PostgreSQL), comma-separated; on the dev server it measures the dev
// server's own process.
const EnvBenchServerPIDs = "TURNSTILE_BENCH_SERVER_PIDS"

// benchRollouts is the size of one measured set (counter, target 9: 9 or
// more turns each with the imperfect policy).
const benchRollouts = 64

// BenchmarkThroughput measures turns per second of one set with 1 and 2
// workers and 1 and 2 environment servers, on the dev server (or on the
// cluster named by TURNSTILE_CLUSTER_ADDRESS), with a 0-latency scripted
// policy, so what is measured is turnstile and Temporal. It also reports
// the cost of one turn: history events and bytes, visibility writes
// (search-attribute upserts, starts and closes), transcript bytes, and
// the CPU time the Temporal side spent.
//
//	go test -run '^$' -bench Throughput -benchtime 1x ./integration
func BenchmarkThroughput(b *testing.B) {
	for _, shape := range []struct{ workers, envServers int }{{1, 1}, {2, 1}, {1, 2}, {2, 2}} {
		b.Run(fmt.Sprintf("workers=%d/envservers=%d", shape.workers, shape.envServers), func(b *testing.B) {
			for range b.N {
				benchSet(b, shape.workers, shape.envServers)
			}
		})
	}
}

func benchSet(b *testing.B, workers, envServers int) {
	c := newCluster(b)
	c.connectTemporal()
	c.startEnvServer()
	urls := []string{c.envURL}
	if envServers == 2 {
		urls = append(urls, c.startSecondEnvServer())
	}
	c.startPolicyServer("--imperfection", "0.2")
	for range workers {
		c.startWorker()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pids := serverPIDs(c)
	cpu0, wcpu0, ecpu0 := cpuSeconds(pids), cpuSeconds(procPIDs(c, "worker")), cpuSeconds(procPIDs(c, "envserver", "envserver-2"))
	set := fmt.Sprintf("bench%d", time.Now().UnixNano()%1e9)
	start := time.Now()
	runs := make([]client.WorkflowRun, benchRollouts)
	for i := range runs {
		in := counterInput(set, i, 9)
		in.Env.URL = urls[i%len(urls)]
		runs[i] = c.submit(ctx, in)
	}
	res := c.results(ctx, runs)
	elapsed := time.Since(start)
	cpu := cpuSeconds(pids) - cpu0
	wcpu := cpuSeconds(procPIDs(c, "worker")) - wcpu0
	ecpu := cpuSeconds(procPIDs(c, "envserver", "envserver-2")) - ecpu0
	turns := 0
	for _, r := range res {
		turns += r.Turns
	}
	events, bytes, vis := 0, 0, 0
	for _, run := range runs {
		sizes, types, _ := c.historySizes(ctx, run.GetID(), run.GetRunID())
		events += len(sizes)
		for i, s := range sizes {
			bytes += s
			switch types[i] {
			case enums.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, enums.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
				enums.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
				vis++
			}
		}
	}
	b.ReportMetric(float64(turns)/elapsed.Seconds(), "turns/s")
	b.ReportMetric(float64(events)/float64(turns), "events/turn")
	b.ReportMetric(float64(bytes)/float64(turns), "history-B/turn")
	b.ReportMetric(float64(vis)/float64(turns), "vis-writes/turn")
	b.ReportMetric(float64(dirBytes(c.store))/float64(turns), "transcript-B/turn")
	if cpu > 0 {
		b.ReportMetric(cpu*1000/float64(turns), "server-cpu-ms/turn")
	}
	b.ReportMetric(wcpu*1000/float64(turns), "worker-cpu-ms/turn")
	b.ReportMetric(ecpu*1000/float64(turns), "envserver-cpu-ms/turn")
	b.Logf("%d rollouts, %d turns in %s", len(res), turns, elapsed.Round(time.Millisecond))
}

// serverPIDs are the processes of the Temporal side: those named in
// EnvBenchServerPIDs, or the dev server this benchmark started.
func serverPIDs(c *cluster) []int {
	var pids []int
	for _, f := range strings.Split(os.Getenv(EnvBenchServerPIDs), ",") {
		if pid, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) > 0 {
		return pids
	}
	return procPIDs(c, "temporal")
}

// procPIDs are the pids of the processes the cluster started under names.
func procPIDs(c *cluster, names ...string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pids []int
	for _, p := range c.procs {
		if slices.Contains(names, p.name) {
			pids = append(pids, p.cmd.Process.Pid)
		}
	}
	return pids
}

// cpuSeconds is the user+system CPU time of pids and their children that
// were waited for, from /proc/<pid>/stat (clock ticks of 1/100 s).
func cpuSeconds(pids []int) float64 {
	total := 0.0
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces).
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			v, _ := strconv.ParseFloat(f[i], 64)
			total += v / 100
		}
	}
	return total
}

// dirBytes is the total size of the regular files under dir (0 for a URL).
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
