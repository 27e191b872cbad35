package trainer_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/trainer"
)

func TestRecoverServerInput(t *testing.T) {
	ok := trainer.RecoverServerRequest{Set: "s1", Server: "http://127.0.0.1:8092/", Replacement: " http://127.0.0.1:8093", Root: "ckpt"}
	in, err := ok.RecoverServerInput("/work", "tq")
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:8092", in.Server, "URLs are cleaned")
	require.Equal(t, "http://127.0.0.1:8093", in.Replacement)
	require.Equal(t, "/work/ckpt", in.Root, "the root is made absolute")
	require.Equal(t, "tq", in.TaskQueue)

	for name, tc := range map[string]struct {
		mod  func(*trainer.RecoverServerRequest)
		want string
	}{
		"no set":          {func(r *trainer.RecoverServerRequest) { r.Set = "" }, "set"},
		"no server":       {func(r *trainer.RecoverServerRequest) { r.Server = "" }, "--server"},
		"bad replacement": {func(r *trainer.RecoverServerRequest) { r.Replacement = "127.0.0.1:1" }, "--replacement"},
		"no root":         {func(r *trainer.RecoverServerRequest) { r.Root = "" }, "--root"},
		"bad checkpoint":  {func(r *trainer.RecoverServerRequest) { r.Checkpoint = "../x" }, "checkpoint_id"},
		"bad request id":  {func(r *trainer.RecoverServerRequest) { r.RequestID = "a b" }, "request_id"},
	} {
		t.Run(name, func(t *testing.T) {
			r := ok
			tc.mod(&r)
			_, err := r.RecoverServerInput("/work", "tq")
			require.ErrorContains(t, err, tc.want)
		})
	}
}
