package artifact

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/turnstile-rl/turnstile/internal/atomicfile"
)

// Write leaves atomicfile's temporary files behind when it is cut short;
// Open must report them and a later Write must clear them, so both must
// know atomicfile's names.
func TestTempNamesAreAtomicfiles(t *testing.T) {
	assert.Equal(t, atomicfile.TempPrefix, tempPrefix, "tempPrefix %q, atomicfile.TempPrefix %q: Open would not recognize a torn write's leftover", tempPrefix, atomicfile.TempPrefix)
	for _, name := range []string{atomicfile.TempPrefix + ManifestName + "-123", atomicfile.TempPrefix + "agents-00000.tar-42"} {
		assert.True(t, leftoverRE.MatchString(name), "leftoverRE does not match %q: a later Write would refuse the directory", name)
	}
}
