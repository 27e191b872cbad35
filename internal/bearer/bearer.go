// Package bearer holds what every turnstile process checks of the bearer
// tokens it is configured with (the gateway's, the environment servers'
// data and control tokens, the policy server's API key) before it serves
// or sends anything: long enough not to be guessed, no stray whitespace,
// and no token opening two doors.
package bearer

import (
	"fmt"
	"strings"
)

// MinLength is the shortest token accepted: 16 characters (`openssl rand
// -hex 16` gives 32).
const MinLength = 16

// Check refuses a configured token that is too short or carries leading or
// trailing whitespace (a trailing newline from a file would never match
// what a client sends). setting names where it came from ("--data-token
// (or $TURNSTILE_DATA_TOKEN)"); an empty token is not checked (whether
// one is required is the caller's rule).
func Check(setting, token string) error {
	switch {
	case token == "":
		return nil
	case token != strings.TrimSpace(token):
		return fmt.Errorf("%s: leading or trailing whitespace", setting)
	case len(token) < MinLength:
		return fmt.Errorf("%s: %d characters, want at least %d (for example `openssl rand -hex 16`)", setting, len(token), MinLength)
	}
	return nil
}

// Distinct refuses two configured tokens that are equal: one would open the
// other's door. An empty token is never equal to anything.
func Distinct(a, aSetting, b, bSetting string) error {
	if a != "" && a == b {
		return fmt.Errorf("%s and %s are equal: each door needs a token of its own", aSetting, bSetting)
	}
	return nil
}
