package rollout

import (
	"fmt"
	"strconv"
	"strings"
)

// SubmittedID is the id of rollout i of a set submitted as a count
// (client.Submit): "<set>-0007". Zero-padding keeps ids sorted in index
// order for sets below 10,000. A restore derives the ids of a submission
// from it, so it can find a run visibility does not list yet.
func SubmittedID(set string, i int) string { return fmt.Sprintf("%s-%04d", set, i) }

// SubmittedIndex is the index i of an id SubmittedID(set, i), and false
// for any other id.
func SubmittedIndex(set, id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, set+"-")
	if !ok || len(rest) < 4 {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || SubmittedID(set, i) != id {
		return 0, false
	}
	return i, true
}
