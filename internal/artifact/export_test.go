package artifact

// SealManifest lets tests forge a self-consistent manifest after editing a
// checkpoint, so that a test reaches the deeper check it is about instead of
// failing at the manifest digest.
func SealManifest(m *Manifest) ([]byte, error) { return encodeManifest(m, nil) }

// SignManifest is SealManifest with a signing key.
func SignManifest(m *Manifest, key []byte) ([]byte, error) { return encodeManifest(m, key) }

// CanonicalIndexLine lets tests write index files in the canonical form.
func CanonicalIndexLine(e IndexEntry) ([]byte, error) { return canonicalIndexLine(e) }
