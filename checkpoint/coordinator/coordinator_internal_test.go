package coordinator

import (
	"context"
	"testing"

	"github.com/turnstile-rl/turnstile/storage"
)

func TestRecordsRoundTripSortedAndDeterministic(t *testing.T) {
	ctx := context.Background()
	dir, err := storage.Dir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string][]byte{
		"b": []byte(`{"checkpoint_id":"c","set":"s","input":{"rollout_id":"b","set":"s"},"boundary":{"rollout_id":"b"}}`),
		"a": []byte(`{ "checkpoint_id":"c", "set":"s","input":{"rollout_id":"a","set":"s"},"boundary":{"rollout_id":"a"}}`),
	}
	d1, err := writeRecords(ctx, at(dir, "r1.jsonl"), recs)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := writeRecords(ctx, at(dir, "r2.jsonl"), recs)
	if err != nil || d1 != d2 {
		t.Fatalf("same records, digests %s and %s (%v)", d1, d2, err)
	}
	back, err := readRecords(ctx, at(dir, "r1.jsonl"))
	if err != nil || len(back) != 2 || !equalCompact(back["a"], recs["a"]) {
		t.Fatalf("read back %q, %v", back, err)
	}
}

func equalCompact(a, b []byte) bool {
	strip := func(x []byte) string {
		out := make([]byte, 0, len(x))
		for _, c := range x {
			if c != ' ' {
				out = append(out, c)
			}
		}
		return string(out)
	}
	return strip(a) == strip(b)
}
