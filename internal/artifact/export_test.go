package artifact

// SealManifest lets tests forge a self-consistent manifest after editing a
// checkpoint, so that a test reaches the deeper check it is about instead of
// failing at the manifest digest.
func SealManifest(m *Manifest) ([]byte, error) { return encodeManifest(m) }

// CanonicalIndexLine lets tests write index files in the canonical form.
func CanonicalIndexLine(e IndexEntry) ([]byte, error) { return canonicalIndexLine(e) }
