package storage

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// EnvFileMode is the setting of the mode local stores write files with
// (octal, "0640"); directories get the same bits plus x where r is set.
const EnvFileMode = "TURNSTILE_FILE_MODE"

// DefaultFileMode is the mode of every file a local store writes unless
// configured otherwise: transcripts, checkpoints and staging files hold
// conversations and environment state, readable by the process's user
// only. Directories get DirMode of it (0700).
const DefaultFileMode fs.FileMode = 0o600

// DirMode is the mode of the directories of a store whose files have mode
// file: the same bits, plus x wherever r is set (0600 → 0700, 0640 →
// 0750).
func DirMode(file fs.FileMode) fs.FileMode {
	file = file.Perm()
	return file | (file&0o444)>>2
}

// ParseFileMode parses a file mode setting: octal ("0640", "640",
// "0o640"), at least rw for the owner, nothing executable, nothing
// writable by others than the owner's group.
func ParseFileMode(v string) (fs.FileMode, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "0o")
	n, err := strconv.ParseUint(s, 8, 32)
	switch {
	case err != nil || s == "":
		return 0, fmt.Errorf("file mode %q: want an octal mode such as 0600 or 0640", v)
	case n&^0o666 != 0:
		return 0, fmt.Errorf("file mode %q: only read and write bits (no execute, setuid or sticky bits)", v)
	case n&0o600 != 0o600:
		return 0, fmt.Errorf("file mode %q: the owner must be able to read and write", v)
	case n&0o002 != 0:
		return 0, fmt.Errorf("file mode %q: writable by anyone", v)
	}
	return fs.FileMode(n), nil
}

// FileModeFromLookup reads EnvFileMode through lookup (os.LookupEnv, or a
// map in tests); unset, DefaultFileMode.
func FileModeFromLookup(lookup func(string) (string, bool)) (fs.FileMode, error) {
	v, ok := lookup(EnvFileMode)
	if !ok || strings.TrimSpace(v) == "" {
		return DefaultFileMode, nil
	}
	m, err := ParseFileMode(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", EnvFileMode, err)
	}
	return m, nil
}
