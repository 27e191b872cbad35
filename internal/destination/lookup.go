package destination

import (
	"fmt"
	"strings"
)

// Defaults are what a process's configuration builds on: its default
// environment server and model endpoint, the global secrets, and the
// object-store locations it was configured with (their endpoints are
// admitted, so the transcript store keeps working).
type Defaults struct {
	EnvURL, ModelURL                string
	DataToken, ControlToken, APIKey string
	StoreLocations                  []string
}

// FromLookup reads the configuration through lookup (os.LookupEnv in a
// process, a map in tests) on top of d. Every error names the variable at
// fault.
func FromLookup(lookup func(string) (string, bool), d Defaults) (Config, error) {
	get := func(key string) string {
		v, _ := lookup(key)
		return strings.TrimSpace(v)
	}
	c := Config{DataToken: d.DataToken, ControlToken: d.ControlToken, APIKey: d.APIKey}
	var err error
	if c.EnvServers, err = envServers(get, d.EnvURL); err != nil {
		return Config{}, err
	}
	if c.ModelEndpoints, err = modelEndpoints(get, d.ModelURL); err != nil {
		return Config{}, err
	}
	for _, l := range []struct {
		key string
		dst *[]Prefix
	}{
		{EnvAllowedEnvURLs, &c.EnvURLs}, {EnvAllowedModelURLs, &c.ModelURLs}, {EnvAllowedParticipants, &c.Participants},
	} {
		if *l.dst, err = ParsePrefixes(get(l.key)); err != nil {
			return Config{}, fmt.Errorf("%s: %w", l.key, err)
		}
	}
	if err := c.storeEndpoints(get(EnvAllowedStoreEndpoints), d.StoreLocations); err != nil {
		return Config{}, err
	}
	return c, c.checkTokens()
}

// pair is one name=url entry of a list.
type pair struct{ name, url string }

// pairs parses "name=url,name=url" of variable key; names are checked,
// distinct and not the default's.
func pairs(key, value string) ([]pair, error) {
	var out []pair
	seen := map[string]bool{}
	for _, entry := range strings.Split(value, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		name, raw, ok := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: entry %q: want name=url", key, entry)
		case name == DefaultName:
			return nil, fmt.Errorf("%s: %q is the default's name (set by its own variable)", key, name)
		case seen[name]:
			return nil, fmt.Errorf("%s: %q is named twice", key, name)
		}
		if err := ValidateName("name", name); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		u, err := Canonical(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", key, name, err)
		}
		seen[name] = true
		out = append(out, pair{name, u})
	}
	return out, nil
}

// envServers is the default server (when defURL is set) and the named ones,
// each with its own tokens when their variables are set.
func envServers(get func(string) string, defURL string) ([]Server, error) {
	named, err := pairs(EnvEnvServers, get(EnvEnvServers))
	if err != nil {
		return nil, err
	}
	if defURL != "" {
		u, err := Canonical(defURL)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvEnvURL, err)
		}
		named = append([]pair{{DefaultName, u}}, named...)
	}
	out := make([]Server, len(named))
	for i, p := range named {
		out[i] = Server{Name: p.name, URL: p.url,
			DataToken: get(SecretVar(DataTokenPrefix, p.name)), ControlToken: get(SecretVar(ControlTokenPrefix, p.name))}
	}
	return out, nil
}

// modelEndpoints is the default endpoint (when defURL is set) and the named
// ones, each with its own key when its variable is set.
func modelEndpoints(get func(string) string, defURL string) ([]Endpoint, error) {
	named, err := pairs(EnvModelEndpoints, get(EnvModelEndpoints))
	if err != nil {
		return nil, err
	}
	if defURL != "" {
		u, err := Canonical(defURL)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvModelBaseURL, err)
		}
		named = append([]pair{{DefaultName, u}}, named...)
	}
	out := make([]Endpoint, len(named))
	for i, p := range named {
		out[i] = Endpoint{Name: p.name, URL: p.url, APIKey: get(SecretVar(APIKeyPrefix, p.name))}
	}
	return out, nil
}

// storeEndpoints admits the endpoints of the configured locations and of
// the allowlist ("aws" admits AWS's own).
func (c *Config) storeEndpoints(allowed string, locations []string) error {
	for _, loc := range locations {
		endpoint, object, err := StoreEndpoint(loc)
		switch {
		case err != nil:
			return fmt.Errorf("store location %s: %w", redactQuery(loc), err)
		case !object:
		case endpoint == "":
			c.StoreAWS = true
		default:
			p, err := ParsePrefix(endpoint)
			if err != nil {
				return fmt.Errorf("store location %s: endpoint: %w", redactQuery(loc), err)
			}
			c.StoreEndpoints = append(c.StoreEndpoints, p)
		}
	}
	for _, entry := range strings.Split(allowed, ",") {
		entry = strings.TrimSpace(entry)
		switch entry {
		case "":
		case AWS:
			c.StoreAWS = true
		default:
			p, err := ParsePrefix(entry)
			if err != nil {
				return fmt.Errorf("%s: %w", EnvAllowedStoreEndpoints, err)
			}
			c.StoreEndpoints = append(c.StoreEndpoints, p)
		}
	}
	return nil
}

// checkTokens refuses a server whose data and control tokens are equal:
// the environment servers refuse that, and the data token would open the
// control plane.
func (c *Config) checkTokens() error {
	for _, s := range c.EnvServers {
		data, control := or(s.DataToken, c.DataToken), or(s.ControlToken, c.ControlToken)
		if data == "" || data != control {
			continue
		}
		dataVar, controlVar := strings.TrimSuffix(DataTokenPrefix, "_"), strings.TrimSuffix(ControlTokenPrefix, "_")
		if s.DataToken != "" {
			dataVar = SecretVar(DataTokenPrefix, s.Name)
		}
		if s.ControlToken != "" {
			controlVar = SecretVar(ControlTokenPrefix, s.Name)
		}
		return fmt.Errorf("%s and %s are equal (environment server %s): the data token must not open the control plane", dataVar, controlVar, s.Name)
	}
	return nil
}
