// Command worker runs a turnstile worker: it polls the rollout task queue and
// hosts the Rollout workflow and its activities until SIGINT or SIGTERM.
//
// Settings come from the environment: TURNSTILE_* (see package workers) and
// the Temporal CLI's own TEMPORAL_* variables or temporal.toml profile.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/workers"
)

// dialTimeout bounds the connection attempt at start-up, so an unreachable
// Temporal is reported instead of retried forever.
const dialTimeout = 10 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := workers.ConfigFromEnv()
	if err != nil {
		return err
	}
	logger, err := workers.NewZapLogger(cfg.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = logger.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts, err := workers.ClientOptions(logger)
	if err != nil {
		return err
	}
	c, err := workers.Dial(ctx, opts, dialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()

	w, err := workers.New(c, cfg, logger)
	if err != nil {
		return err
	}
	logger.Info("worker starting",
		zap.String("temporal", workers.HostPort(opts)),
		zap.String("namespace", workers.Namespace(opts)),
		zap.String("task_queue", cfg.TaskQueue),
		zap.Int("pid", os.Getpid()),
	)
	// Run stops the worker gracefully (in-flight tasks finish or are
	// abandoned after the stop timeout) once the interrupt channel fires.
	if err := w.Run(interruptOn(ctx)); err != nil {
		return fmt.Errorf("worker on task queue %s: %w", cfg.TaskQueue, err)
	}
	logger.Info("worker stopped")
	return nil
}

// interruptOn adapts ctx to the channel worker.Run waits on.
func interruptOn(ctx context.Context) <-chan any {
	ch := make(chan any)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}
