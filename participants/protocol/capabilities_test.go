package protocol_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// TestCheckCapabilities: what a coordinator needs of a participant's
// capabilities (RULES.md R17), each lack named.
func TestCheckCapabilities(t *testing.T) {
	good := protocol.Capabilities{Component: protocol.ComponentEnvironmentServer, Name: "env-0",
		SchemaVersion: protocol.ControlSchemaVersion, Features: protocol.RequiredFeatures()}
	require.NoError(t, protocol.CheckCapabilities(good))
	good.Features = append(good.Features, "a_feature_of_tomorrow_v1", protocol.FeatureRetireStraggler)
	require.NoError(t, protocol.CheckCapabilities(good), "more features than needed are fine")

	for _, tc := range []struct {
		name string
		edit func(*protocol.Capabilities)
		want string
	}{
		{"another component", func(c *protocol.Capabilities) { c.Component = "policy_server" }, `component "policy_server"`},
		{"no component", func(c *protocol.Capabilities) { c.Component = "" }, `component ""`},
		{"another schema", func(c *protocol.Capabilities) { c.SchemaVersion = 2 }, "schema_version 2"},
		{"no name", func(c *protocol.Capabilities) { c.Name = " " }, "no name"},
		{"no features", func(c *protocol.Capabilities) { c.Features = nil }, protocol.FeatureAbsoluteDeadline},
		{"no restore sessions", func(c *protocol.Capabilities) {
			c.Features = slices.DeleteFunc(slices.Clone(c.Features), func(f string) bool { return f == protocol.FeatureRestoreSessions })
		}, "lack [" + protocol.FeatureRestoreSessions + "]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			require.ErrorContains(t, protocol.CheckCapabilities(c), tc.want)
		})
	}
}
