package trainer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// CheckRows checks every row and returns every problem found, by line:
// a bad or duplicate id, an unknown environment, a missing task or one the
// environment's Start refuses, bad sampling, a bad policy or turn limit.
// The task check starts (and closes) a local session of the environment
// with repeat 0's seed, so a refusal is found before anything starts
// rather than as one failed rollout per repeat.
func CheckRows(rows []DatasetRow) []RowError { return checkRows(rows, nil) }

// checkRows is CheckRows admitting, beyond the catalog's, the environments
// declared lists (those a request's environment server declares).
func checkRows(rows []DatasetRow, declared []envs.Spec) []RowError {
	var errs []RowError
	seen := map[string]int{}
	for i, row := range rows {
		line, id := rowLine(row, i), RowID(row, i)
		report := func(err error) { errs = append(errs, RowError{Line: line, Err: err}) }
		if err := checkLen("id", id, MaxRowIDLen); err != nil {
			report(problem("field id is too long", err))
		} else if err := rollout.ValidateName("id", id, MaxRowIDLen); err != nil {
			report(problem("field id is not a valid row id", err))
		} else if first, dup := seen[id]; dup {
			report(problem(fmt.Sprintf("field id repeats the id of line %d", first), fmt.Errorf("id %q is also the id of line %d", id, first)))
		} else {
			seen[id] = line
		}
		for _, err := range checkRow(row, id, declared) {
			report(err)
		}
	}
	return errs
}

// checkRow checks one row's fields.
func checkRow(row DatasetRow, id string, declared []envs.Spec) []error {
	var errs []error
	if err := checkSampling(row.Sampling); err != nil {
		errs = append(errs, problem("field sampling is invalid", err))
	}
	if row.MaxTurns < 0 || row.MaxTurns > rollout.MaxMaxTurns {
		errs = append(errs, problem("field max_turns is out of range",
			fmt.Errorf("max_turns %d: want 1..%d, or 0 for the default", row.MaxTurns, rollout.MaxMaxTurns)))
	}
	if p := row.Policy; p != nil {
		if err := checkLen("policy.model", p.Model, MaxModelNameLen); err != nil {
			errs = append(errs, problem("field policy.model is too long", err))
		} else if p.Model != strings.TrimSpace(p.Model) {
			errs = append(errs, problem("field policy.model has surrounding spaces", fmt.Errorf("policy.model %q: surrounding spaces", p.Model)))
		}
		if err := checkDestination("policy.endpoint", p.Endpoint, "policy.base_url", p.BaseURL); err != nil {
			errs = append(errs, problem("field policy names its endpoint wrongly (policy.endpoint or policy.base_url)", err))
		}
	}
	if err := checkTask(row, id, declared); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// checkTask checks that row names a known environment (of the catalog, or
// declared by the request's environment server) and a task its Start
// accepts; a declared environment's server checks the task when the
// rollout starts.
func checkTask(row DatasetRow, id string, declared []envs.Spec) error {
	if row.Env == "" {
		return problem("field env is missing", fmt.Errorf("env is required (known: %s)", strings.Join(catalog.Names(), ", ")))
	}
	if err := checkLen("env", row.Env, MaxModelNameLen); err != nil {
		return problem("field env is too long", err)
	}
	entry, err := catalog.Find(row.Env)
	_, served := declaredSpec(declared, row.Env)
	if err != nil && !served {
		return problem("field env names no known environment", fmt.Errorf("env: %w; an environment of your own: name the environment server that serves it (--env-server)", err))
	}
	if t := bytes.TrimSpace(row.Task); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return problem("field task is missing", errors.New("task is required"))
	}
	if len(row.Task) > MaxTaskBytes {
		return problem("field task is too large", fmt.Errorf("task: %d bytes, more than the %d a task may have", len(row.Task), MaxTaskBytes))
	}
	if err != nil {
		return nil // declared by its server, which checks the task at start
	}
	if !entry.Hosted() {
		return nil // its host checks the task when the rollout starts
	}
	// The set is not known here; the seed only matters to environments
	// whose Start uses it, and none refuses a task for its seed.
	session, _, err := entry.New().Start(rowSeed("", row, id, 0), row.Task)
	if err != nil {
		return problem("field task is refused by its environment", fmt.Errorf("environment %s refuses the task: %w", row.Env, err))
	}
	if err := session.Close(); err != nil {
		return problem("the environment could not check field task", fmt.Errorf("environment %s: close the session that checked the task: %w", row.Env, err))
	}
	return nil
}

// checkURL refuses a URL that is neither empty nor http(s).
func checkURL(what, value string) error {
	if err := checkLen(what, value, MaxURLLen); err != nil {
		return err
	}
	if value != "" && !strings.HasPrefix(value, "http://") && !strings.HasPrefix(value, "https://") {
		return fmt.Errorf("%s %q: want an http:// or https:// URL", what, value)
	}
	return nil
}

// checkDestination checks a server or endpoint named by name (its form)
// or by URL (http or https), not both. Whether the workers admit it is
// theirs to say.
func checkDestination(nameFlag, name, urlFlag, url string) error {
	if err := checkLen(nameFlag, name, MaxModelNameLen); err != nil {
		return err
	}
	if err := checkLen(urlFlag, url, MaxURLLen); err != nil {
		return err
	}
	if name != "" && url != "" {
		return fmt.Errorf("%s %q and %s %q: give one, not both", nameFlag, name, urlFlag, url)
	}
	if name != "" {
		if err := destination.ValidateName(nameFlag, name); err != nil {
			return err
		}
	}
	return checkURL(urlFlag, url)
}

// isDataset reports whether r submits a dataset rather than --count
// rollouts of --env.
func (r SubmitRequest) isDataset() bool { return r.Rows != nil || r.Repeats != 0 }

// validateDataset checks the dataset mode of r: its own fields, that it
// sets none of the count mode's, and every row (all bad rows at once).
func (r SubmitRequest) validateDataset() error {
	switch {
	case r.Count != 0:
		return errors.New("--count and --tasks are exclusive: a dataset's size is its rows × --repeats")
	case len(r.Envs) > 0:
		return errors.New("--env and --tasks are exclusive: each dataset row names its environment")
	case r.Seed != 0:
		return errors.New("--seed and --tasks are exclusive: seeds derive from set, row id and repeat (a row may set its own seed)")
	case len(r.Rows) == 0:
		return errors.New("--tasks: the dataset has no rows")
	case r.Repeats < 1 || r.Repeats > MaxRepeats:
		return fmt.Errorf("--repeats %d: want 1..%d", r.Repeats, MaxRepeats)
	case len(r.Rows)*r.Repeats > maxCount:
		return fmt.Errorf("%d rows × %d repeats = %d rollouts, more than %d", len(r.Rows), r.Repeats, len(r.Rows)*r.Repeats, maxCount)
	}
	if err := (rollout.Limits{GroupRetries: r.GroupRetries}).Validate(); err != nil {
		return fmt.Errorf("--group-retries %d: %w", *r.GroupRetries, err)
	}
	bad := &DatasetError{}
	for _, e := range checkRows(r.Rows, r.Declared) {
		bad.add(e.Line, e.Err)
	}
	return bad.orNil()
}

// buildDatasetInputs returns the inputs of r's dataset: every repeat of
// row 0, then of row 1, …, so a group's rollouts start together.
func buildDatasetInputs(r SubmitRequest) ([]rollout.Input, error) {
	out := make([]rollout.Input, 0, len(r.Rows)*r.Repeats)
	for i, row := range r.Rows {
		id := RowID(row, i)
		var task bytes.Buffer
		// Compact, so equal tasks written with different spacing give
		// equal inputs.
		if err := json.Compact(&task, row.Task); err != nil {
			return nil, fmt.Errorf("line %d: task: %w", rowLine(row, i), err)
		}
		policy, maxTurns := rowPolicy(r, row), row.MaxTurns
		if maxTurns == 0 {
			maxTurns = r.MaxTurns
		}
		if maxTurns == 0 {
			maxTurns = DefaultMaxTurns(row.Env)
		}
		limits := r.limits(maxTurns)
		limits.GroupRetries = r.GroupRetries
		for rep := range r.Repeats {
			out = append(out, rollout.Input{
				RolloutID:     DatasetRolloutID(r.Set, id, rep),
				Set:           r.Set,
				Task:          json.RawMessage(task.Bytes()),
				Env:           rollout.EnvRef{Name: row.Env, URL: r.EnvURL, Server: r.EnvServer},
				Policy:        policy,
				Seed:          rowSeed(r.Set, row, id, rep),
				Limits:        limits,
				Sampling:      cmp.Or(row.Sampling, r.Sampling),
				RequireAck:    r.RequireAck,
				ProgressEvery: rollout.Duration(r.ProgressEvery),
				Group:         id,
				Repeat:        rep,
				GroupSize:     r.Repeats,
			})
		}
	}
	return out, nil
}

// rowPolicy is the policy of row's rollouts: the row's, with the request's
// (then the environment's scripted policy) filling what it leaves empty.
func rowPolicy(r SubmitRequest, row DatasetRow) rollout.PolicyRef {
	var p rollout.PolicyRef
	if row.Policy != nil {
		p = *row.Policy
	}
	if p.Model == "" {
		p.Model = r.Policy
	}
	if p.Model == "" {
		p.Model = defaultPolicy(row.Env)
	}
	if p.BaseURL == "" && p.Endpoint == "" {
		p.BaseURL, p.Endpoint = r.ModelURL, r.PolicyEndpoint
	}
	return p
}
