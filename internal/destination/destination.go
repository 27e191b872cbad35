// Package destination decides where turnstile's processes may send a
// secret: the environment servers' data token, their control token, the
// model API key and the object store's credentials each go only to
// destinations the operator configured, never to one a request names.
//
// The operator configures, by environment variable (the worker, and the
// gateway, which reads the same ones):
//
//	TURNSTILE_ENV_URL                 the default environment server (named "default")
//	TURNSTILE_ENV_SERVERS             more named servers: a=http://10.0.0.5:8091,b=https://envs.internal
//	TURNSTILE_DATA_TOKEN_<NAME>       a data token of one named server (else TURNSTILE_DATA_TOKEN)
//	TURNSTILE_CONTROL_TOKEN_<NAME>    a control token of one named server (else TURNSTILE_CONTROL_TOKEN)
//	TURNSTILE_MODEL_BASE_URL          the default model endpoint (named "default")
//	TURNSTILE_MODEL_ENDPOINTS         more named endpoints: vllm=http://gpu-0:8000/v1
//	TURNSTILE_MODEL_API_KEY_<NAME>    the API key of one named endpoint (else TURNSTILE_MODEL_API_KEY)
//	TURNSTILE_ALLOWED_ENV_URLS        URL prefixes a rollout may name as its environment server
//	TURNSTILE_ALLOWED_MODEL_URLS      URL prefixes a rollout may name as its model endpoint
//	TURNSTILE_ALLOWED_PARTICIPANTS    URL prefixes a checkpoint, restore or resume may name
//	TURNSTILE_ALLOWED_STORE_ENDPOINTS object-store endpoints a checkpoint root may name ("aws": AWS's own)
//
// <NAME> is the server's name upper-cased with '-' as '_'. An allowlist
// entry is http(s)://host[:port][/path], port "*" for any port; a URL
// matches when scheme, host and port are equal and its path lies under the
// entry's. By default nothing is allowed beyond the configured servers and
// endpoints (and the transcript store's own object-store endpoint).
//
// A rollout picks a configured server or endpoint by name, or names a URL:
// a URL is admitted when it is a configured one's (it then gets that one's
// token) or an allowlist admits it (it gets the global token). A URL a
// participant allowlist admits is admitted as an environment server too:
// the data token is a subset of what the control token opens.
package destination

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Environment variables the configuration is read from.
const (
	EnvEnvURL                = "TURNSTILE_ENV_URL"
	EnvModelBaseURL          = "TURNSTILE_MODEL_BASE_URL"
	EnvEnvServers            = "TURNSTILE_ENV_SERVERS"
	EnvModelEndpoints        = "TURNSTILE_MODEL_ENDPOINTS"
	EnvAllowedEnvURLs        = "TURNSTILE_ALLOWED_ENV_URLS"
	EnvAllowedModelURLs      = "TURNSTILE_ALLOWED_MODEL_URLS"
	EnvAllowedParticipants   = "TURNSTILE_ALLOWED_PARTICIPANTS"
	EnvAllowedStoreEndpoints = "TURNSTILE_ALLOWED_STORE_ENDPOINTS"
	// Prefixes of the per-name secrets: the name upper-cased, '-' as '_'.
	DataTokenPrefix    = "TURNSTILE_DATA_TOKEN_"
	ControlTokenPrefix = "TURNSTILE_CONTROL_TOKEN_"
	APIKeyPrefix       = "TURNSTILE_MODEL_API_KEY_"
)

// DefaultName names the default environment server (TURNSTILE_ENV_URL)
// and the default model endpoint (TURNSTILE_MODEL_BASE_URL).
const DefaultName = "default"

// AWS, in TURNSTILE_ALLOWED_STORE_ENDPOINTS, admits an object-store
// location that names no endpoint: the SDK's own AWS endpoints.
const AWS = "aws"

// Kinds of destination, as messages name them.
const (
	KindEnv         = "environment server"
	KindModel       = "model endpoint"
	KindParticipant = "participant"
	KindStore       = "object-store endpoint"
)

// namePattern is what a server or endpoint name may be: it also names an
// environment variable (its token), so it stays short and plain.
var namePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// Server is a configured environment server. Empty tokens fall back to the
// global ones.
type Server struct {
	Name, URL               string
	DataToken, ControlToken string
}

// Endpoint is a configured model endpoint. An empty key falls back to the
// global one.
type Endpoint struct {
	Name, URL, APIKey string
}

// Config is where each secret may go. Its zero value admits nothing.
type Config struct {
	// EnvServers and ModelEndpoints are the configured ones, the default
	// (DefaultName) first when there is one.
	EnvServers     []Server
	ModelEndpoints []Endpoint
	// The allowlists.
	EnvURLs, ModelURLs, Participants, StoreEndpoints []Prefix
	// StoreAWS admits object-store locations that name no endpoint.
	StoreAWS bool
	// The global secrets, for what has none of its own.
	DataToken, ControlToken, APIKey string
}

// Target is a resolved destination: where to send, and what.
type Target struct {
	// Name is the configured server's or endpoint's name; empty for a URL
	// an allowlist admitted.
	Name string
	// URL is the canonical URL to send to.
	URL string
	// Secret is the token or key to send there; empty for none.
	Secret string
}

// RefusedError is a destination refused: nothing was sent. Setting names
// what the operator would change to allow it.
type RefusedError struct {
	Kind, Value, Setting string
	Msg                  string
}

func (e *RefusedError) Error() string { return e.Msg }

// IsRefused reports whether err holds a RefusedError.
func IsRefused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}

// Env resolves the environment server a rollout names, by name or by URL
// (neither: the default), with the data token to send it.
func (c *Config) Env(name, rawURL string) (Target, error) {
	s, err := c.envServer(name, rawURL, false)
	if err != nil {
		return Target{}, err
	}
	return Target{Name: s.Name, URL: s.URL, Secret: or(s.DataToken, c.DataToken)}, nil
}

// EnvControl resolves the environment server a rollout names like Env, but
// for its control plane: the server must be admitted as a participant, and
// the target carries the control token.
func (c *Config) EnvControl(name, rawURL string) (Target, error) {
	s, err := c.envServer(name, rawURL, true)
	if err != nil {
		return Target{}, err
	}
	return Target{Name: s.Name, URL: s.URL, Secret: or(s.ControlToken, c.ControlToken)}, nil
}

// Participant resolves a participant (an environment server's control
// plane) by URL, with the control token to send it.
func (c *Config) Participant(rawURL string) (Target, error) {
	if strings.TrimSpace(rawURL) == "" {
		return Target{}, refused(KindParticipant, rawURL, EnvAllowedParticipants, "a participant needs a URL")
	}
	return c.EnvControl("", rawURL)
}

// CheckParticipants refuses the first participant not admitted.
func (c *Config) CheckParticipants(urls []string) error {
	for _, u := range urls {
		if _, err := c.Participant(u); err != nil {
			return err
		}
	}
	return nil
}

// envServer resolves an environment server by name, or by URL against the
// configured servers and then the allowlists (for its control plane, the
// participants' only); neither is the default.
func (c *Config) envServer(name, rawURL string, control bool) (Server, error) {
	names := c.EnvServerNames()
	kind, setting, lists := KindEnv, EnvAllowedEnvURLs, [][]Prefix{c.EnvURLs, c.Participants}
	if control {
		kind, setting, lists = KindParticipant, EnvAllowedParticipants, [][]Prefix{c.Participants}
	}
	switch {
	case name != "" && rawURL != "":
		return Server{}, refused(kind, name, EnvEnvServers, "give an environment server's name or its URL, not both (name %q, URL %s)", name, rawURL)
	case name != "":
		for _, s := range c.EnvServers {
			if s.Name == name {
				return s, nil
			}
		}
		return Server{}, refused(kind, name, EnvEnvServers, "%s %q is not configured (configured: %s); name one of them, or add %s=<url> to %s",
			KindEnv, name, list(names), name, EnvEnvServers)
	case rawURL == "":
		if len(c.EnvServers) == 0 || c.EnvServers[0].Name != DefaultName {
			return Server{}, refused(kind, DefaultName, EnvEnvURL, "no default %s is configured (%s)", KindEnv, EnvEnvURL)
		}
		return c.EnvServers[0], nil
	}
	u, err := parse(rawURL)
	if err != nil {
		return Server{}, refused(kind, rawURL, setting, "%s %v (a URL %s admits is plain http(s))", kind, err, setting)
	}
	for _, s := range c.EnvServers {
		if s.URL == u.String() {
			return s, nil
		}
	}
	for _, l := range lists {
		if matchAny(l, u) {
			return Server{URL: u.String()}, nil
		}
	}
	if control {
		return Server{}, refused(kind, rawURL, setting,
			"%s %s is not a configured destination of the control token (configured servers: %s); add it to %s, or admit it with %s",
			kind, u, list(names), EnvEnvServers, EnvAllowedParticipants)
	}
	return Server{}, refused(kind, rawURL, setting,
		"%s %s is not a configured destination of the data token (configured servers: %s); name a configured server, or admit the URL with %s (or %s)",
		kind, u, list(names), EnvAllowedEnvURLs, EnvAllowedParticipants)
}

// Model resolves the model endpoint a policy names, by name or by URL
// (neither: the default), with the API key to send it.
func (c *Config) Model(name, rawURL string) (Target, error) {
	names := c.ModelEndpointNames()
	found := func(e Endpoint) (Target, error) {
		return Target{Name: e.Name, URL: e.URL, Secret: or(e.APIKey, c.APIKey)}, nil
	}
	switch {
	case name != "" && rawURL != "":
		return Target{}, refused(KindModel, name, EnvModelEndpoints, "give a model endpoint's name or its base URL, not both (name %q, URL %s)", name, rawURL)
	case name != "":
		for _, e := range c.ModelEndpoints {
			if e.Name == name {
				return found(e)
			}
		}
		return Target{}, refused(KindModel, name, EnvModelEndpoints, "%s %q is not configured (configured: %s); name one of them, or add %s=<url> to %s",
			KindModel, name, list(names), name, EnvModelEndpoints)
	case rawURL == "":
		if len(c.ModelEndpoints) == 0 || c.ModelEndpoints[0].Name != DefaultName {
			return Target{}, refused(KindModel, DefaultName, EnvModelBaseURL, "no default %s is configured (%s)", KindModel, EnvModelBaseURL)
		}
		return found(c.ModelEndpoints[0])
	}
	u, err := parse(rawURL)
	if err != nil {
		return Target{}, refused(KindModel, rawURL, EnvAllowedModelURLs, "%s %v (a URL %s admits is plain http(s))", KindModel, err, EnvAllowedModelURLs)
	}
	for _, e := range c.ModelEndpoints {
		if e.URL == u.String() {
			return found(e)
		}
	}
	if matchAny(c.ModelURLs, u) {
		return Target{URL: u.String(), Secret: c.APIKey}, nil
	}
	return Target{}, refused(KindModel, rawURL, EnvAllowedModelURLs,
		"%s %s is not a configured destination of the model API key (configured endpoints: %s); name a configured endpoint, or admit the URL with %s",
		KindModel, u, list(names), EnvAllowedModelURLs)
}

// Store refuses an object-store location whose endpoint is not admitted;
// a local directory (a path, file://) needs no admission.
func (c *Config) Store(location string) error {
	endpoint, object, err := StoreEndpoint(location)
	switch {
	case err != nil:
		return refused(KindStore, location, EnvAllowedStoreEndpoints, "%s of %s: %v", KindStore, location, err)
	case !object:
		return nil
	case endpoint == "":
		if c.StoreAWS {
			return nil
		}
		return refused(KindStore, AWS, EnvAllowedStoreEndpoints,
			"the object-store location %s names no endpoint (AWS's own), which is not a configured destination of the storage credentials; admit it with %s=%s",
			redactQuery(location), EnvAllowedStoreEndpoints, AWS)
	}
	u, err := parse(endpoint)
	if err == nil && matchAny(c.StoreEndpoints, u) {
		return nil
	}
	return refused(KindStore, endpoint, EnvAllowedStoreEndpoints,
		"%s %s (of %s) is not a configured destination of the storage credentials; admit it with %s",
		KindStore, endpoint, redactQuery(location), EnvAllowedStoreEndpoints)
}

// StoreEndpoint is the endpoint an object-store location names (its first
// endpoint= parameter, the one the driver uses), and whether the location
// is an object store at all (a path or a file:// URL is not).
func StoreEndpoint(location string) (endpoint string, object bool, err error) {
	if !strings.Contains(location, "://") {
		return "", false, nil
	}
	u, err := url.Parse(location)
	if err != nil {
		return "", false, fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme == "file" {
		return "", false, nil
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", true, fmt.Errorf("query: %w", err)
	}
	return q.Get("endpoint"), true, nil
}

// redactQuery is a location without its query (which names no secret, but
// need not be repeated at length).
func redactQuery(location string) string {
	base, _, _ := strings.Cut(location, "?")
	return base
}

func refused(kind, value, setting, format string, args ...any) *RefusedError {
	return &RefusedError{Kind: kind, Value: value, Setting: setting, Msg: fmt.Sprintf(format, args...)}
}

func matchAny(list []Prefix, u *url.URL) bool {
	return slices.ContainsFunc(list, func(p Prefix) bool { return p.Match(u) })
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// EnvServerNames are the configured environment servers' names.
func (c *Config) EnvServerNames() []string {
	out := make([]string, len(c.EnvServers))
	for i, s := range c.EnvServers {
		out[i] = s.Name
	}
	return out
}

// ModelEndpointNames are the configured model endpoints' names.
func (c *Config) ModelEndpointNames() []string {
	out := make([]string, len(c.ModelEndpoints))
	for i, e := range c.ModelEndpoints {
		out[i] = e.Name
	}
	return out
}

// ValidateName checks a server or endpoint name's form.
func ValidateName(what, name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%s %q: want a lower-case letter, then up to 62 lower-case letters, digits or '-'", what, name)
	}
	return nil
}

// SecretVar is the environment variable of a named server's or endpoint's
// own secret: prefix + the name upper-cased, '-' as '_'.
func SecretVar(prefix, name string) string {
	return prefix + strings.ReplaceAll(strings.ToUpper(name), "-", "_")
}
