package envserver_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// A prepare that waits for an in-flight mutation until its deadline, longer
// than the server's write timeout, still gets its answer through: the
// control plane moves the write deadline to the request's deadline.
func TestPrepareWaitOutlastsTheWriteTimeout(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	block := newBlockEnv()
	srv, err := envserver.NewServer(envserver.ServerConfig{
		Envs: []envs.Environment{counter.New(), block}, Name: "env-a", ControlToken: testToken, DataToken: testDataToken,
		WriteTimeout: writeTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.Config.WriteTimeout = writeTimeout
	hs.Start()
	t.Cleanup(func() {
		close(block.release)
		hs.Close()
	})
	f := &ctlFixture{fixture: &fixture{srv: srv, c: protocol.NewDataClient(hs.URL, testDataToken, hs.Client()), url: hs.URL,
		cc: protocol.NewControlClient(hs.URL, testToken, hs.Client())}, block: block}
	f.startEnv(t, "block", "slow", 0)
	f.blockOp(t, "slow", 0, "slow/t0/c0", 0)

	_, err = f.cc.Prepare(context.Background(), protocol.PrepareRequest{CheckpointID: "c1", Deadline: time.Now().Add(5 * writeTimeout)})
	wantRemote(t, err, http.StatusConflict, protocol.CodePrepareTimeout, "slow (attempt 0)")
}
