package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// An environment that is not in the Go catalog (a foreign one, say one
// written in Python on the participant library) is run by naming the
// environment server that serves it: its declaration (GET /v1/envs) says
// it exists, and its rows' tasks go to it unchecked (the server checks a
// task when the rollout starts). Its rollouts default to the generic
// scripted policy (envs.ScriptModel) and the workflow's turn limit.

// ReadTasks reads a dataset of bare tasks for env (`starter submit --env
// ENV --tasks FILE`): one task JSON value per line, blank lines skipped;
// row ids are "row<line>". Every bad line comes back at once in a
// *DatasetError; the rows are checked with the rest of the request
// (SubmitRequest.Validate).
func ReadTasks(r io.Reader, env string) ([]DatasetRow, error) {
	br := bufio.NewReader(r)
	var rows []DatasetRow
	bad := &DatasetError{}
	for line := 1; ; line++ {
		text, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return rows, fmt.Errorf("read tasks line %d: %w", line, err)
		}
		if t := bytes.TrimSpace(text); len(t) > 0 {
			if !json.Valid(t) {
				bad.add(line, problem("is not valid JSON", errors.New("task is not one valid JSON value")))
			} else {
				rows = append(rows, DatasetRow{Env: env, Task: json.RawMessage(slices.Clone(t)), Line: line})
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if len(rows) == 0 && len(bad.Rows) == 0 {
		return nil, errors.New("tasks file has no tasks")
	}
	return rows, bad.orNil()
}

// ForeignEnvs lists the environments r's rows name that are not in the
// catalog, in first-use order.
func (r SubmitRequest) ForeignEnvs() []string {
	var out []string
	for _, row := range r.Rows {
		if _, ok := catalog.Lookup(row.Env); !ok && row.Env != "" && !slices.Contains(out, row.Env) {
			out = append(out, row.Env)
		}
	}
	return out
}

// Declare fetches what r's environment server declares (GET /v1/envs, with
// its data token, as dest resolves it) when r's rows name environments not
// in the catalog and names its environment server (EnvServer or EnvURL),
// and refuses any of them the server does not declare, naming the
// environment and the server. It sets r.Declared; any other request is
// left as it is (Validate refuses an environment the catalog does not
// hold), and nothing is fetched. A nil hc is http.DefaultClient.
func Declare(ctx context.Context, r *SubmitRequest, dest *destination.Config, hc *http.Client) error {
	foreign := r.ForeignEnvs()
	if len(foreign) == 0 || (r.EnvServer == "" && r.EnvURL == "") {
		return nil // Validate refuses what the catalog does not hold, as before
	}
	server := describeServer(r.EnvServer, r.EnvURL)
	target, err := dest.Env(r.EnvServer, r.EnvURL)
	if err != nil {
		return fmt.Errorf("environment %s is not in the catalog (known: %s), and its server cannot be asked for it: %w",
			foreign[0], strings.Join(catalog.Names(), ", "), err)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	var specs []envs.Spec
	if err := protocol.NewDataClient(target.URL, target.Secret, hc).Do(ctx, "GET", "/v1/envs", nil, &specs); err != nil {
		return fmt.Errorf("environment %s is not in the catalog; ask environment server %s (%s) for its environments: %w", foreign[0], server, target.URL, err)
	}
	return CheckDeclared(r, fmt.Sprintf("%s (%s)", server, target.URL), specs)
}

// CheckDeclared refuses any environment of r's rows that neither the
// catalog holds nor specs (what server, named for messages, declares)
// list; otherwise it sets r.Declared to specs.
func CheckDeclared(r *SubmitRequest, server string, specs []envs.Spec) error {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	for _, env := range r.ForeignEnvs() {
		if !slices.Contains(names, env) {
			return fmt.Errorf("environment %s is neither in the catalog (known: %s) nor served by environment server %s, which declares: %s",
				env, strings.Join(catalog.Names(), ", "), server, strings.Join(names, ", "))
		}
	}
	r.Declared = specs
	return nil
}

// describeServer names the environment server a request picks.
func describeServer(name, url string) string {
	switch {
	case name != "":
		return name
	case url != "":
		return url
	}
	return destination.DefaultName
}

// declaredSpec returns the declaration of env among specs.
func declaredSpec(specs []envs.Spec, env string) (envs.Spec, bool) {
	i := slices.IndexFunc(specs, func(s envs.Spec) bool { return s.Name == env })
	if i < 0 {
		return envs.Spec{}, false
	}
	return specs[i], true
}

// defaultPolicy is the model of env's rollouts when neither the request
// nor the row names one: the environment's scripted policy, or for an
// environment not in the catalog the generic one, which plays the script
// its task carries.
func defaultPolicy(env string) string {
	if _, ok := catalog.Lookup(env); ok {
		return ScriptedPolicy(env)
	}
	return envs.ScriptModel
}
