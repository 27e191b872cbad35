package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestForEachBoundsConcurrencyAndStopsAtTheFirstError(t *testing.T) {
	var running, peak, calls atomic.Int64
	// Every item but 3 holds its slot until the failure cancels the batch:
	// an item released any other way would free a slot the loop may refill
	// before the failing item has cancelled, which is legitimate.
	err := forEach(context.Background(), 50, 4, func(ctx context.Context, i int) error {
		calls.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if i == 3 {
			return errors.New("item 3 failed")
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if err == nil || err.Error() != "item 3 failed" {
		t.Fatalf("err = %v, want the first real error alone", err)
	}
	if p := peak.Load(); p > 4 {
		t.Fatalf("%d calls ran at once, limit 4", p)
	}
	if c := calls.Load(); c != 4 {
		t.Fatalf("%d items ran, want the 4 admitted before the first error", c)
	}
}

func TestForEachRunsEveryItem(t *testing.T) {
	seen := make([]atomic.Bool, 100)
	if err := forEach(context.Background(), len(seen), 7, func(_ context.Context, i int) error {
		seen[i].Store(true)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if !seen[i].Load() {
			t.Fatalf("item %d never ran", i)
		}
	}
}

func TestRecordsRoundTripSortedAndDeterministic(t *testing.T) {
	dir := t.TempDir()
	recs := map[string][]byte{
		"b": []byte(`{"checkpoint_id":"c","set":"s","input":{"rollout_id":"b","set":"s"},"boundary":{"rollout_id":"b"}}`),
		"a": []byte(`{ "checkpoint_id":"c", "set":"s","input":{"rollout_id":"a","set":"s"},"boundary":{"rollout_id":"a"}}`),
	}
	d1, err := writeRecords(dir+"/r1.jsonl", recs)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := writeRecords(dir+"/r2.jsonl", recs)
	if err != nil || d1 != d2 {
		t.Fatalf("same records, digests %s and %s (%v)", d1, d2, err)
	}
	back, err := readRecords(dir + "/r1.jsonl")
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
