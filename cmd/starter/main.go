// Command starter is the pipeline/operator CLI of turnstile: it submits sets of
// rollouts, reports on them through Temporal visibility, acknowledges their
// results, and checkpoints and restores a set.
//
//	starter submit --set s1 --count 64 --env counter --policy scripted-counter --seed 7 --wait
//	starter status --set s1 --verbose
//	starter admission --set s1 --max-in-flight 512
//	starter summary --set s1
//	starter results --set s1 > s1.jsonl
//	starter submit --set d1 --tasks rows.jsonl --repeats 8
//	starter export --set d1 --file d1.trajectories.jsonl
//	starter checkpoint --set s1 --id ck1 --root ckpt --participants http://127.0.0.1:8091 --wait
//	starter restore --id ck1 --root ckpt --participants http://127.0.0.1:8091 --wait
//	starter recover --set s1 --server http://127.0.0.1:8092 --replacement http://127.0.0.1:8093 --root ckpt --wait
//	starter resume --set s1 --id ck1 --participants http://127.0.0.1:8091
//	starter acknowledge --set s1 --receipts s1.jsonl
//
// The Temporal connection is configured like the Temporal CLI's
// (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, temporal.toml profiles).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/logging"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// dialTimeout bounds connecting to Temporal, so an unreachable server is a
// prompt error, not a hang.
const dialTimeout = 10 * time.Second

// globals are the flags every command shares.
type globals struct {
	taskQueue string
	logLevel  string
	output    string // table or json
	conn      workers.Connection
	logFormat string
	// addr and namespace are what withClient dialled, for messages.
	addr, namespace string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCmd()
	err := root.ExecuteContext(ctx)
	stop()
	var cf *trainer.CauseFirstError
	if level, _ := root.PersistentFlags().GetString("log-level"); level == "debug" && errors.As(err, &cf) {
		fmt.Fprintln(os.Stderr, "starter: as Temporal reported it:", cf.Err)
	}
	if code := cli.Report(os.Stderr, "starter", cli.CobraUsage(err)); code != cli.ExitOK {
		os.Exit(code)
	}
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "starter",
		Short:         "Submit and inspect sets of turnstile rollouts",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// A bad flag prints the command's usage and exits 2; a failure while a
	// command runs prints only its error and exits 1.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		_ = c.Usage()
		return cli.Usage(err)
	})
	defaultQueue := os.Getenv(workers.EnvTaskQueue)
	if defaultQueue == "" {
		defaultQueue = rollout.TaskQueue
	}
	root.PersistentFlags().StringVar(&g.taskQueue, "task-queue", defaultQueue, "task queue the rollout workers poll (env "+workers.EnvTaskQueue+")")
	connectionFlags(root.PersistentFlags(), &g.conn)
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table, or json (one JSON document; JSON lines for per-rollout output)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if g.output != "table" && g.output != "json" {
			return cli.Usage(fmt.Errorf("--output %q: want table or json", g.output))
		}
		return nil
	}
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", logging.FormatConsole, "format of those log lines: console or json")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "warn", "level of the Temporal SDK's own log lines on stderr; debug also prints a failed workflow's error as Temporal reported it")
	root.AddCommand(newSubmitCmd(g), newSummaryCmd(g), newStatusCmd(g), newResultsCmd(g),
		newCheckpointCmd(g), newRestoreCmd(g), newRecoverCmd(g), newResumeCmd(g), newAcknowledgeCmd(g), newSetupCmd(g), newExportCmd(g),
		newAdmissionCmd(g), newScheduleCmd(g), newGCCmd(g), newPinCmd(g))
	return root
}

// connectionFlags are the Temporal CLI's connection flags, with its
// precedence: a flag over TEMPORAL_* over temporal.toml.
func connectionFlags(f *pflag.FlagSet, c *workers.Connection) {
	f.StringVar(&c.Address, "address", "", "Temporal frontend host:port (env TEMPORAL_ADDRESS; default localhost:7233)")
	f.StringVarP(&c.Namespace, "namespace", "n", "", "Temporal namespace (env TEMPORAL_NAMESPACE; default default)")
	f.StringVar(&c.ConfigFile, "config-file", "", "temporal.toml to read (env TEMPORAL_CONFIG_FILE)")
	f.StringVar(&c.Profile, "profile", "", "profile of temporal.toml (env TEMPORAL_PROFILE)")
	f.StringVar(&c.APIKey, "api-key", "", "API key, e.g. for Temporal Cloud (env TEMPORAL_API_KEY)")
	f.BoolVar(&c.TLS, "tls", false, "connect with TLS (env TEMPORAL_TLS)")
	f.StringVar(&c.TLSCertPath, "tls-cert-path", "", "client certificate for mutual TLS (env TEMPORAL_TLS_CLIENT_CERT_PATH)")
	f.StringVar(&c.TLSKeyPath, "tls-key-path", "", "client key for mutual TLS (env TEMPORAL_TLS_CLIENT_KEY_PATH)")
	f.StringVar(&c.TLSCAPath, "tls-ca-path", "", "CA certificate the server's is checked against (env TEMPORAL_TLS_SERVER_CA_CERT_PATH)")
	f.StringVar(&c.TLSServerName, "tls-server-name", "", "server name TLS checks (env TEMPORAL_TLS_SERVER_NAME)")
	f.BoolVar(&c.TLSDisableHostVerification, "tls-disable-host-verification", false, "skip the server's host name check")
}

// dial connects to Temporal as configured by temporal.toml / TEMPORAL_* and
// returns the address it dialled, for messages.
func (g *globals) dial(ctx context.Context) (client.Client, string, error) {
	logger, err := logging.New(os.Stderr, g.logLevel, g.logFormat)
	if err != nil {
		return nil, "", err
	}
	opts, err := workers.ClientOptionsWith(logger, g.conn)
	if err != nil {
		return nil, "", err
	}
	c, err := workers.Dial(ctx, opts, dialTimeout)
	if err != nil {
		return nil, "", err
	}
	g.namespace = workers.Namespace(opts)
	return c, workers.HostPort(opts), nil
}

// emit prints v as one JSON document with --output json, else as table
// prints it.
func (g *globals) emit(w io.Writer, v any, table func(io.Writer) error) error {
	if g.output == "json" {
		return json.NewEncoder(w).Encode(v)
	}
	return table(w)
}

// withClient connects and hands use a turnstile client on the task queue;
// the connection is closed when use returns.
func (g *globals) withClient(ctx context.Context, use func(c *trainer.Client) error) error {
	tc, addr, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer tc.Close()
	g.addr = addr
	c := trainer.New(tc, g.taskQueue)
	if c.Failpoints, err = failpoint.FromEnv(); err != nil {
		return fmt.Errorf("%s: %w", failpoint.EnvVar, err)
	}
	return use(c)
}
