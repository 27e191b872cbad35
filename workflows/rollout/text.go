package rollout

import "unicode/utf8"

// Truncate cuts s to at most n bytes, never inside a character, and marks
// the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // never cut a character in half
	}
	return s[:n] + "…"
}
