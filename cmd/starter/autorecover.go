package main

import (
	"errors"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/turnstile-rl/turnstile/trainer"
)

// autoRecoverFlags are submit's automatic recovery settings.
type autoRecoverFlags struct {
	on                    bool
	participants          string
	standby               string
	root                  string
	every, timeout, bound time.Duration
	misses                int
}

func (a *autoRecoverFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&a.on, "auto-recover", false, "watch the set's environment servers and recover the rollouts of one declared dead onto a standby (or the same address once it is back), with no operator (docs/recovery.md)")
	f.StringVar(&a.participants, "auto-participants", "", "with --auto-recover: the environment server URLs the set's rollouts use, comma-separated")
	f.StringVar(&a.standby, "auto-standby", "", "with --auto-recover: idle standby environment server URLs, comma-separated, taken in order as replacements")
	f.StringVar(&a.root, "auto-root", "", "with --auto-recover: the checkpoint root a recovery goes back to (the set's newest committed checkpoint there)")
	f.DurationVar(&a.every, "auto-every", 0, "with --auto-recover: probe interval (0: 5s)")
	f.DurationVar(&a.timeout, "auto-timeout", 0, "with --auto-recover: budget of one probe (0: 5s)")
	f.IntVar(&a.misses, "auto-misses", 0, "with --auto-recover: probes in a row a server must miss (0: 3)")
	f.DurationVar(&a.bound, "auto-bound", 0, "with --auto-recover: least silence since a server's last answer before it is declared dead (0: 30s)")
}

// settings are the flags as the trainer's AutoRecover, nil without
// --auto-recover.
func (a *autoRecoverFlags) settings() (*trainer.AutoRecover, error) {
	if !a.on {
		if a.participants != "" || a.standby != "" || a.root != "" {
			return nil, errors.New("--auto-participants, --auto-standby and --auto-root need --auto-recover")
		}
		return nil, nil
	}
	return &trainer.AutoRecover{Participants: splitList(a.participants), Standby: splitList(a.standby), Root: a.root,
		Every: a.every, Timeout: a.timeout, Misses: a.misses, Bound: a.bound}, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
