package artifact_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/testsupport/artifactedit"
)

var (
	testKey  = []byte("0123456789abcdef0123456789abcdef-test-key")
	otherKey = []byte("fedcba9876543210fedcba9876543210-other-key")
)

func TestSignedRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, err := artifact.Write(ctx, dir, testMeta, sampleSections(), artifact.Options{Key: testKey})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(m.Signature, artifact.SignaturePrefix), "signature %q", m.Signature)

	c, err := artifact.OpenWith(ctx, dir, testID, artifact.Settings{Key: testKey})
	require.NoError(t, err)
	require.Equal(t, m, c.Manifest())

	// The digest does not depend on the key: it identifies the content.
	plain := t.TempDir()
	pm, err := artifact.Write(ctx, plain, testMeta, sampleSections(), artifact.Options{})
	require.NoError(t, err)
	require.Equal(t, pm.Digest, m.Digest)
	require.Empty(t, pm.Signature)

	// A retried Write with the same key recognises its checkpoint.
	again, err := artifact.Write(ctx, dir, testMeta, sampleSections(), artifact.Options{Key: testKey})
	require.NoError(t, err)
	require.Equal(t, m, again)

	// Without a key, a signed checkpoint reads as before.
	_, err = artifact.Open(ctx, dir, testID)
	require.NoError(t, err)
}

func TestSignedCheckpointFailsClosed(t *testing.T) {
	ctx := context.Background()
	signed := t.TempDir()
	_, err := artifact.Write(ctx, signed, testMeta, sampleSections(), artifact.Options{Key: testKey})
	require.NoError(t, err)
	unsigned := t.TempDir()
	mustWrite(t, unsigned, sampleSections(), artifact.Options{})

	// Forged: an index changed and the manifest re-sealed (digest
	// recomputed) by someone without the key.
	forged := t.TempDir()
	_, err = artifact.Write(ctx, forged, testMeta, sampleSections(), artifact.Options{Key: testKey})
	require.NoError(t, err)
	m := artifactedit.ReadManifest(t, forged)
	m.Labels["set"] = "another"
	wrong, err := artifact.SignManifest(&m, otherKey)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(forged, artifact.ManifestName), wrong, 0o600))

	for _, tc := range []struct{ name, dir, want string }{
		{"unsigned", unsigned, "unsigned, but this process has a checkpoint key"},
		{"another key", forged, "signature does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := artifact.OpenWith(ctx, tc.dir, testID, artifact.Settings{Key: testKey})
			require.ErrorIs(t, err, artifact.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, artifact.ManifestName)
		})
	}
	t.Run("wrong key", func(t *testing.T) {
		_, err := artifact.OpenWith(ctx, signed, testID, artifact.Settings{Key: otherKey})
		require.ErrorIs(t, err, artifact.ErrInvalid)
		require.ErrorContains(t, err, "signature does not verify")
	})
	t.Run("signature stripped and resealed", func(t *testing.T) {
		dir := t.TempDir()
		_, err := artifact.Write(ctx, dir, testMeta, sampleSections(), artifact.Options{Key: testKey})
		require.NoError(t, err)
		m := artifactedit.ReadManifest(t, dir)
		m.Signature = ""
		artifactedit.WriteManifest(t, dir, m)
		_, err = artifact.OpenWith(ctx, dir, testID, artifact.Settings{Key: testKey})
		require.ErrorContains(t, err, "unsigned")
	})
	t.Run("malformed signature", func(t *testing.T) {
		dir := t.TempDir()
		_, err := artifact.Write(ctx, dir, testMeta, sampleSections(), artifact.Options{Key: testKey})
		require.NoError(t, err)
		path := filepath.Join(dir, artifact.ManifestName)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		b = []byte(strings.Replace(string(b), artifact.SignaturePrefix, "hmac-md5:", 1))
		require.NoError(t, os.WriteFile(path, b, 0o600))
		_, err = artifact.Open(ctx, dir, testID)
		require.ErrorIs(t, err, artifact.ErrInvalid)
		require.ErrorContains(t, err, "signature")
	})
}

func TestSettingsFromLookup(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, append(testKey, '\n'), 0o600))
	short := filepath.Join(t.TempDir(), "short")
	require.NoError(t, os.WriteFile(short, []byte("too short\n"), 0o600))
	lookup := func(env map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	}

	s, err := artifact.SettingsFromLookup(lookup(nil))
	require.NoError(t, err)
	require.Equal(t, artifact.Settings{MaxManifestBytes: artifact.DefaultMaxManifestBytes,
		MaxIndexBytes: artifact.DefaultMaxIndexBytes, MaxRecordBytes: artifact.DefaultMaxRecordBytes}, s)

	s, err = artifact.SettingsFromLookup(lookup(map[string]string{
		artifact.EnvMaxIndexBytes: "2GiB", artifact.EnvMaxRecordBytes: "1048576", artifact.EnvKeyFile: keyFile}))
	require.NoError(t, err)
	require.Equal(t, int64(2<<30), s.MaxIndexBytes)
	require.Equal(t, int64(1<<20), s.MaxRecordBytes)
	require.Equal(t, testKey, s.Key)

	for env, v := range map[string]string{
		artifact.EnvMaxIndexBytes:    "-1",
		artifact.EnvMaxManifestBytes: "lots",
		artifact.EnvKeyFile:          short,
	} {
		_, err := artifact.SettingsFromLookup(lookup(map[string]string{env: v}))
		require.ErrorContains(t, err, env, "%s=%s", env, v)
	}
}
