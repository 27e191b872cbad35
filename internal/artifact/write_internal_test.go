package artifact

import (
	"testing"

	"github.com/turnstile-rl/turnstile/internal/atomicfile"
)

// Write leaves atomicfile's temporary files behind when it is cut short;
// Open must report them and a later Write must clear them, so both must
// know atomicfile's names.
func TestTempNamesAreAtomicfiles(t *testing.T) {
	if tempPrefix != atomicfile.TempPrefix {
		t.Errorf("tempPrefix %q, atomicfile.TempPrefix %q: Open would not recognize a torn write's leftover", tempPrefix, atomicfile.TempPrefix)
	}
	for _, name := range []string{atomicfile.TempPrefix + ManifestName + "-123", atomicfile.TempPrefix + "agents-00000.tar-42"} {
		if !leftoverRE.MatchString(name) {
			t.Errorf("leftoverRE does not match %q: a later Write would refuse the directory", name)
		}
	}
}
