// Package devenv reads temporal-dev.yaml, the one file that holds the Temporal
// dev-server and CLI settings, derives the `temporal server start-dev` command
// line from it, and makes sure a Temporal CLI binary is available.
//
// The same file is the Temporal CLI's env file
// (`temporal --env-file temporal-dev.yaml --env dev workflow list`). The CLI
// unmarshals the whole file as map[section]map[name]map[key]string, so a file
// that does not have exactly that shape breaks every CLI command that uses it.
// Load therefore checks the shape first and strictly, then the meaning.
package devenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Names fixed by the project layout and the Temporal CLI.
const (
	// DefaultConfigFile is the settings file at the project root.
	DefaultConfigFile = "temporal-dev.yaml"
	// DefaultEnv is the environment name used by the scripts and the demo.
	DefaultEnv = "dev"

	// CLIModule is the module path `go install` builds the Temporal CLI from.
	CLIModule = "github.com/temporalio/cli/cmd/temporal"
	// CLIVersion is the CLI release the project is tested with. Newer tags do
	// not install through the Go module proxy.
	CLIVersion = "v1.5.1"
	// CLIBinary is the CLI's executable name.
	CLIBinary = "temporal"
	// LocalBinDir is the project-local (gitignored) directory tools go into.
	LocalBinDir = "bin"
)

// Sections of the settings file.
const (
	SectionEnv              = "env"
	SectionServer           = "server"
	SectionSearchAttributes = "search-attributes"
	SectionDynamicConfig    = "dynamic-config"
)

// Keys of the server section.
const (
	KeyIP          = "ip"
	KeyPort        = "port"
	KeyUI          = "ui"
	KeyUIPort      = "ui-port"
	KeyMetricsPort = "metrics-port"
	KeyHTTPPort    = "http-port"
	KeyDBFilename  = "db-filename"
	KeyNamespace   = "namespace"
	KeyLogLevel    = "log-level"
)

// KeyAddress is the env section's server address key; with KeyNamespace it is
// all the env section holds (both are Temporal CLI client flag names).
const KeyAddress = "address"

var (
	knownSections = []string{SectionEnv, SectionServer, SectionSearchAttributes, SectionDynamicConfig}
	serverKeys    = []string{KeyIP, KeyPort, KeyUI, KeyUIPort, KeyMetricsPort, KeyHTTPPort, KeyDBFilename, KeyNamespace, KeyLogLevel}
	// Required server keys; the others may be omitted or empty.
	requiredServerKeys = []string{KeyIP, KeyPort, KeyUI, KeyNamespace}
	envKeys            = []string{KeyAddress, KeyNamespace}
	// The search attribute types `temporal server start-dev` accepts.
	searchAttributeTypes = []string{"Text", "Keyword", "Int", "Double", "Bool", "Datetime", "KeywordList"}
	logLevels            = []string{"debug", "info", "warn", "error", "never"}

	identifierRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	dynamicConfigRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	namespaceRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// Config is a validated settings file.
type Config struct {
	// Path is the file the config was read from.
	Path string
	// Envs holds one entry per environment name (the second level of the file).
	Envs map[string]Env
}

// Env is everything the file says about one environment.
type Env struct {
	Name   string
	Client Client
	Server Server
	// SearchAttributes maps attribute name to its Temporal type name.
	SearchAttributes map[string]string
	// DynamicConfig maps a dynamic config key to its value as JSON text.
	DynamicConfig map[string]string
}

// Client is the env section: what CLI commands and SDK clients connect to.
type Client struct {
	Address   string
	Namespace string
}

// Server is the server section: how `temporal server start-dev` is started.
type Server struct {
	IP   string
	Port int
	UI   bool
	// UIPort 0 lets the CLI use Port+1000.
	UIPort int
	// MetricsPort and HTTPPort 0 let the CLI choose a free port.
	MetricsPort int
	HTTPPort    int
	// DBFilename "" keeps all state in memory.
	DBFilename string
	Namespace  string
	LogLevel   string
}

// Overrides change the file's server settings for one start, so a test
// harness can run a server on free ports next to the developer's one.
// Zero values (and nil pointers) keep what the file says.
type Overrides struct {
	Port        int
	UIPort      int
	MetricsPort int
	HTTPPort    int
	// DBFilename, when not empty, replaces the file's value.
	DBFilename string
	// Headless, when set, turns the UI off (true) or on (false).
	Headless *bool
	LogLevel string
}

// Load reads and validates a settings file. Every problem is reported with the
// file name and the section.name.key path it concerns.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read dev settings: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfg.Path = path
	return cfg, nil
}

// Parse validates the contents of a settings file.
func Parse(data []byte) (*Config, error) {
	raw, err := parseShape(data)
	if err != nil {
		return nil, err
	}
	for section := range raw {
		if !contains(knownSections, section) {
			return nil, fmt.Errorf("unknown section %q (want one of %s)", section, strings.Join(knownSections, ", "))
		}
	}
	if len(raw[SectionServer]) == 0 {
		return nil, fmt.Errorf("section %q is missing or empty", SectionServer)
	}
	cfg := &Config{Envs: map[string]Env{}}
	for _, name := range sortedKeys(raw[SectionServer]) {
		env, err := parseEnv(raw, name)
		if err != nil {
			return nil, err
		}
		cfg.Envs[name] = env
	}
	// An environment named only in a side section is a typo, not a default.
	for _, section := range []string{SectionEnv, SectionSearchAttributes, SectionDynamicConfig} {
		for _, name := range sortedKeys(raw[section]) {
			if _, ok := raw[SectionServer][name]; !ok {
				return nil, fmt.Errorf("%s.%s: environment %q has no %s.%s section", section, name, name, SectionServer, name)
			}
		}
	}
	return cfg, nil
}

// Env returns the settings of one environment.
func (c *Config) Env(name string) (Env, error) {
	env, ok := c.Envs[name]
	if !ok {
		return Env{}, fmt.Errorf("environment %q not in %s (have %s)", name, c.describe(), strings.Join(sortedKeys(c.Envs), ", "))
	}
	return env, nil
}

// StartDevArgs returns the arguments for the temporal binary (starting with
// "server", "start-dev") that start a dev server for env with the overrides
// applied. Search attributes and dynamic config values are emitted in sorted
// order so the same file always gives the same command line.
func (c *Config) StartDevArgs(env string, overrides Overrides) ([]string, error) {
	e, err := c.Env(env)
	if err != nil {
		return nil, err
	}
	s, err := e.Server.apply(overrides)
	if err != nil {
		return nil, fmt.Errorf("%s: %s.%s with overrides: %w", c.describe(), SectionServer, env, err)
	}
	args := []string{"server", "start-dev",
		"--ip", s.IP,
		"--port", strconv.Itoa(s.Port),
	}
	if s.UI {
		if s.UIPort != 0 {
			args = append(args, "--ui-port", strconv.Itoa(s.UIPort))
		}
	} else {
		args = append(args, "--headless")
	}
	if s.MetricsPort != 0 {
		args = append(args, "--metrics-port", strconv.Itoa(s.MetricsPort))
	}
	if s.HTTPPort != 0 {
		args = append(args, "--http-port", strconv.Itoa(s.HTTPPort))
	}
	if s.DBFilename != "" {
		args = append(args, "--db-filename", s.DBFilename)
	}
	args = append(args, "--namespace", s.Namespace)
	if s.LogLevel != "" {
		args = append(args, "--log-level", s.LogLevel)
	}
	for _, name := range sortedKeys(e.SearchAttributes) {
		args = append(args, "--search-attribute", name+"="+e.SearchAttributes[name])
	}
	for _, key := range sortedKeys(e.DynamicConfig) {
		args = append(args, "--dynamic-config-value", key+"="+e.DynamicConfig[key])
	}
	return args, nil
}

func (c *Config) describe() string {
	if c.Path == "" {
		return "dev settings"
	}
	return c.Path
}

// apply returns s with the overrides applied, re-validated.
func (s Server) apply(o Overrides) (Server, error) {
	if o.Port != 0 {
		s.Port = o.Port
	}
	if o.UIPort != 0 {
		s.UIPort = o.UIPort
	}
	if o.MetricsPort != 0 {
		s.MetricsPort = o.MetricsPort
	}
	if o.HTTPPort != 0 {
		s.HTTPPort = o.HTTPPort
	}
	if o.DBFilename != "" {
		s.DBFilename = o.DBFilename
	}
	if o.Headless != nil {
		s.UI = !*o.Headless
	}
	if o.LogLevel != "" {
		s.LogLevel = o.LogLevel
	}
	if err := s.validate(); err != nil {
		return Server{}, err
	}
	return s, nil
}

func (s Server) validate() error {
	for _, p := range []struct {
		key      string
		port     int
		optional bool
	}{
		{KeyPort, s.Port, false},
		{KeyUIPort, s.UIPort, true},
		{KeyMetricsPort, s.MetricsPort, true},
		{KeyHTTPPort, s.HTTPPort, true},
	} {
		if (p.port == 0 && !p.optional) || p.port < 0 || p.port > 65535 {
			return fmt.Errorf("%s %d is not a port (1-65535)", p.key, p.port)
		}
	}
	// Two listeners on one port would only fail once the server starts.
	used := map[int]string{s.Port: KeyPort}
	uiPort := s.UIPort
	if uiPort == 0 {
		uiPort = s.Port + 1000
	}
	for _, p := range []struct {
		key  string
		port int
		on   bool
	}{
		{KeyUIPort, uiPort, s.UI},
		{KeyMetricsPort, s.MetricsPort, s.MetricsPort != 0},
		{KeyHTTPPort, s.HTTPPort, s.HTTPPort != 0},
	} {
		if !p.on {
			continue
		}
		if other, dup := used[p.port]; dup {
			return fmt.Errorf("%s %d is the same port as %s", p.key, p.port, other)
		}
		used[p.port] = p.key
	}
	if s.LogLevel != "" && !contains(logLevels, s.LogLevel) {
		return fmt.Errorf("%s %q is not one of %s", KeyLogLevel, s.LogLevel, strings.Join(logLevels, ", "))
	}
	return nil
}

// parseEnv reads one environment from every section that names it. The
// sections are checked in a fixed order (server, env, search attributes,
// dynamic config), so a file with several mistakes always reports the same
// one first.
func parseEnv(raw map[string]map[string]map[string]string, name string) (Env, error) {
	if !identifierRE.MatchString(strings.ReplaceAll(name, "-", "_")) {
		return Env{}, fmt.Errorf("%s.%s: environment name must be letters, digits, '-' or '_'", SectionServer, name)
	}
	env := Env{Name: name}
	var err error
	if env.Server, err = parseServer(raw[SectionServer][name], name); err != nil {
		return Env{}, err
	}
	if env.Client, err = parseClient(raw[SectionEnv], name, env.Server); err != nil {
		return Env{}, err
	}
	if env.SearchAttributes, err = parseSearchAttributes(raw[SectionSearchAttributes][name], name); err != nil {
		return Env{}, err
	}
	if env.DynamicConfig, err = parseDynamicConfig(raw[SectionDynamicConfig][name], name); err != nil {
		return Env{}, err
	}
	return env, nil
}

// serverKey names a key of environment name's server section in errors.
func serverKey(name, key string) string { return SectionServer + "." + name + "." + key }

// parseServer reads and validates the server section of environment name.
func parseServer(srv map[string]string, name string) (Server, error) {
	where := func(key string) string { return serverKey(name, key) }
	if err := checkKeys(srv, serverKeys, requiredServerKeys, SectionServer+"."+name); err != nil {
		return Server{}, err
	}
	var s Server
	s.IP = srv[KeyIP]
	if s.IP != "localhost" && net.ParseIP(s.IP) == nil {
		return Server{}, fmt.Errorf("%s: %q is not an IP address", where(KeyIP), s.IP)
	}
	var err error
	if s.Port, err = parsePort(srv, KeyPort, false); err != nil {
		return Server{}, fmt.Errorf("%s: %w", where(KeyPort), err)
	}
	if s.UIPort, err = parsePort(srv, KeyUIPort, true); err != nil {
		return Server{}, fmt.Errorf("%s: %w", where(KeyUIPort), err)
	}
	if s.MetricsPort, err = parsePort(srv, KeyMetricsPort, true); err != nil {
		return Server{}, fmt.Errorf("%s: %w", where(KeyMetricsPort), err)
	}
	if s.HTTPPort, err = parsePort(srv, KeyHTTPPort, true); err != nil {
		return Server{}, fmt.Errorf("%s: %w", where(KeyHTTPPort), err)
	}
	switch srv[KeyUI] {
	case "true":
		s.UI = true
	case "false":
		s.UI = false
	default:
		return Server{}, fmt.Errorf("%s: %q must be \"true\" or \"false\"", where(KeyUI), srv[KeyUI])
	}
	s.DBFilename = srv[KeyDBFilename]
	s.Namespace = srv[KeyNamespace]
	if !namespaceRE.MatchString(s.Namespace) {
		return Server{}, fmt.Errorf("%s: %q is not a namespace name", where(KeyNamespace), s.Namespace)
	}
	s.LogLevel = srv[KeyLogLevel]
	if err := s.validate(); err != nil {
		return Server{}, fmt.Errorf("%s.%s: %w", SectionServer, name, err)
	}
	return s, nil
}

// parseClient reads the env section of environment name, which must exist
// and agree with its server s.
func parseClient(section map[string]map[string]string, name string, s Server) (Client, error) {
	cli, ok := section[name]
	if !ok {
		return Client{}, fmt.Errorf("%s.%s: missing; the Temporal CLI needs it for --env %s", SectionEnv, name, name)
	}
	if err := checkKeys(cli, envKeys, envKeys, SectionEnv+"."+name); err != nil {
		return Client{}, err
	}
	c := Client{Address: cli[KeyAddress], Namespace: cli[KeyNamespace]}
	// The CLI and the server must not drift apart: the CLI would talk to
	// nothing, or to another namespace, without saying so.
	want := net.JoinHostPort(s.IP, strconv.Itoa(s.Port))
	if s.IP == "localhost" {
		want = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	}
	if c.Address != want && c.Address != net.JoinHostPort("localhost", strconv.Itoa(s.Port)) {
		return Client{}, fmt.Errorf("%s.%s.%s: %q does not match %s and %s (want %q)",
			SectionEnv, name, KeyAddress, c.Address, serverKey(name, KeyIP), serverKey(name, KeyPort), want)
	}
	if c.Namespace != s.Namespace {
		return Client{}, fmt.Errorf("%s.%s.%s: %q does not match %s %q",
			SectionEnv, name, KeyNamespace, c.Namespace, serverKey(name, KeyNamespace), s.Namespace)
	}
	return c, nil
}

// parseSearchAttributes checks the search attributes of environment name.
// The result is never nil, so an environment without any still has a map.
func parseSearchAttributes(attrs map[string]string, name string) (map[string]string, error) {
	out := map[string]string{}
	for attr, typ := range attrs {
		at := SectionSearchAttributes + "." + name + "." + attr
		if !identifierRE.MatchString(attr) {
			return nil, fmt.Errorf("%s: name must be an identifier", at)
		}
		if !contains(searchAttributeTypes, typ) {
			return nil, fmt.Errorf("%s: unknown type %q (want one of %s)", at, typ, strings.Join(searchAttributeTypes, ", "))
		}
		out[attr] = typ
	}
	return out, nil
}

// parseDynamicConfig checks the dynamic config of environment name. The
// result is never nil, so an environment without any still has a map.
func parseDynamicConfig(values map[string]string, name string) (map[string]string, error) {
	out := map[string]string{}
	for key, value := range values {
		at := SectionDynamicConfig + "." + name + "." + key
		if !dynamicConfigRE.MatchString(key) {
			return nil, fmt.Errorf("%s: key must be dot-separated identifiers", at)
		}
		if err := checkJSONValue(value); err != nil {
			return nil, fmt.Errorf("%s: %q is not one JSON value: %w", at, value, err)
		}
		out[key] = value
	}
	return out, nil
}

// parseShape checks that data is exactly what the Temporal CLI can read:
// a mapping of mappings of mappings of string scalars.
func parseShape(data []byte) (map[string]map[string]map[string]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errors.New("file is empty")
	}
	out := map[string]map[string]map[string]string{}
	err := forEachPair(doc.Content[0], "top level", func(section string, sn *yaml.Node) error {
		out[section] = map[string]map[string]string{}
		return forEachPair(sn, "section "+section, func(name string, nn *yaml.Node) error {
			out[section][name] = map[string]string{}
			return forEachPair(nn, section+"."+name, func(key string, vn *yaml.Node) error {
				at := section + "." + name + "." + key
				if vn.Kind != yaml.ScalarNode {
					return fmt.Errorf("%s (line %d): value must be a quoted string, not a %s", at, vn.Line, kindName(vn))
				}
				if vn.Tag != "!!str" {
					return fmt.Errorf("%s (line %d): value %s must be a quoted string (\"%s\")", at, vn.Line, vn.Value, vn.Value)
				}
				out[section][name][key] = vn.Value
				return nil
			})
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// forEachPair walks a mapping node whose keys are plain strings, rejecting
// duplicates (yaml.v3 would otherwise fail later, inside the CLI).
func forEachPair(n *yaml.Node, where string, fn func(key string, value *yaml.Node) error) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s (line %d): must be a mapping, not a %s", where, n.Line, kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" || k.Value == "<<" {
			return fmt.Errorf("%s (line %d): keys must be non-empty strings", where, k.Line)
		}
		if seen[k.Value] {
			return fmt.Errorf("%s (line %d): duplicate key %q", where, k.Line, k.Value)
		}
		seen[k.Value] = true
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return "scalar " + n.Tag
	default:
		return "node"
	}
}

func checkKeys(m map[string]string, allowed, required []string, where string) error {
	for _, k := range sortedKeys(m) {
		if !contains(allowed, k) {
			return fmt.Errorf("%s.%s: unknown key (want one of %s)", where, k, strings.Join(allowed, ", "))
		}
	}
	for _, k := range required {
		if _, ok := m[k]; !ok {
			return fmt.Errorf("%s.%s: missing", where, k)
		}
	}
	return nil
}

func parsePort(m map[string]string, key string, optional bool) (int, error) {
	v := m[key]
	if v == "" && optional {
		return 0, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != v {
		return 0, fmt.Errorf("%q is not a port (1-65535)", v)
	}
	return p, nil
}

// checkJSONValue accepts exactly one JSON value, as the CLI's
// --dynamic-config-value parser does.
func checkJSONValue(s string) error {
	dec := json.NewDecoder(strings.NewReader(s))
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if dec.InputOffset() != int64(len(s)) {
		return errors.New("trailing data")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// EnsureCLI returns the path of a usable Temporal CLI: `temporal` on PATH,
// else <projectRoot>/bin/temporal, else it builds CLIVersion into
// <projectRoot>/bin with `go install` (minutes the first time; the Go build
// cache makes later installs fast). Progress goes to stderr.
func EnsureCLI(ctx context.Context, projectRoot string) (string, error) {
	return ensureCLI(ctx, projectRoot, os.Stderr)
}

func ensureCLI(ctx context.Context, projectRoot string, progress io.Writer) (string, error) {
	if p, err := exec.LookPath(CLIBinary); err == nil {
		return p, nil
	}
	root, err := filepath.Abs(projectRoot)
	if err != nil {
		return "", fmt.Errorf("ensure temporal CLI: project root: %w", err)
	}
	binDir := filepath.Join(root, LocalBinDir)
	local := filepath.Join(binDir, CLIBinary)
	if isExecutable(local) {
		return local, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("ensure temporal CLI: not on PATH, not at %s, and no go command to build it: %w", local, err)
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("ensure temporal CLI: %w", err)
	}
	pkg := CLIModule + "@" + CLIVersion
	fmt.Fprintf(progress, "temporal CLI not found; building %s into %s (takes several minutes the first time)...\n", pkg, binDir)
	cmd := exec.CommandContext(ctx, goBin, "install", pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOBIN="+binDir)
	cmd.Stdout = progress
	cmd.Stderr = progress
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ensure temporal CLI: go install %s: %w", pkg, err)
	}
	if !isExecutable(local) {
		return "", fmt.Errorf("ensure temporal CLI: go install %s finished but %s is not an executable", pkg, local)
	}
	fmt.Fprintf(progress, "temporal CLI installed at %s\n", local)
	return local, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
