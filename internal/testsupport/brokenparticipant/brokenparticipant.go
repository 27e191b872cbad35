// Package brokenparticipant wraps a working participant (the Go environment
// server) so that it breaks one requirement of the protocol the way an
// implementation written from incomplete documents would: tests show that
// the conformance kit fails it and that the coordinator does not take it
// for success.
package brokenparticipant

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// Wrap is a broken variant of a participant's handler.
type Wrap func(http.Handler) http.Handler

// LiteralR11 keeps RULES.md R11 without R18's live-rollback exception: once
// a checkpoint id is resumed, every operation with it but resume is
// stale_checkpoint, a restore under that id (the default restore id)
// included.
func LiteralR11(next http.Handler) http.Handler {
	var mu sync.Mutex
	retired := map[string]bool{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := readBody(r)
		switch r.URL.Path {
		case "/v1/control/restore":
			var req protocol.RestoreRequest
			_ = json.Unmarshal(body, &req)
			id := req.RestoreID
			if id == "" {
				id = req.CheckpointID
			}
			mu.Lock()
			stale := retired[id]
			mu.Unlock()
			if stale {
				refuse(w, http.StatusConflict, protocol.CodeStaleCheckpoint, "checkpoint "+id+" was resumed and is retired")
				return
			}
		case "/v1/control/resume":
			var req protocol.ResumeRequest
			_ = json.Unmarshal(body, &req)
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			if rec.Code == http.StatusOK && req.RestoreID == "" {
				mu.Lock()
				retired[req.CheckpointID] = true
				mu.Unlock()
			}
			CopyAnswer(w, rec)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Capabilities reports capabilities edited by edit.
func Capabilities(edit func(*protocol.Capabilities)) Wrap {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/control/capabilities" {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			var caps protocol.Capabilities
			if rec.Code == http.StatusOK && json.Unmarshal(rec.Body.Bytes(), &caps) == nil {
				edit(&caps)
				b, _ := json.Marshal(caps)
				rec.Body.Reset()
				rec.Body.Write(b)
			}
			CopyAnswer(w, rec)
		})
	}
}

// RewriteRestore installs another attempt map than the one sent, and
// answers for that one.
func RewriteRestore(edit func(attempts map[string]int)) Wrap {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/control/restore" {
				var req protocol.RestoreRequest
				if json.Unmarshal(readBody(r), &req) == nil {
					edit(req.Attempts)
					b, _ := json.Marshal(req)
					r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// PlainArtifact commits "plain JSON plus a manifest" at the location asked
// for (cut.json and a manifest.json naming its SHA-256), and keeps the real
// checkpoint beside it (<location>.real), where its own restores read it:
// consistent with itself, unreadable to the coordinator.
func PlainArtifact(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/control/commit":
			plainCommit(next, w, r)
		case "/v1/control/restore":
			var req protocol.RestoreRequest
			if json.Unmarshal(readBody(r), &req) == nil {
				if _, err := os.Stat(req.Location + ".real"); err == nil {
					req.Location += ".real"
					b, _ := json.Marshal(req)
					r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
				}
			}
			next.ServeHTTP(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

func plainCommit(next http.Handler, w http.ResponseWriter, r *http.Request) {
	var req protocol.CommitRequest
	if json.Unmarshal(readBody(r), &req) != nil || req.Location == "" {
		next.ServeHTTP(w, r)
		return
	}
	loc := req.Location
	if entries, err := os.ReadDir(loc); err == nil {
		for _, e := range entries {
			if e.Name() != "cut.json" && e.Name() != "manifest.json" {
				// Something else is there: the server answers for it
				// (location_conflict, or checkpoint_conflict after a commit).
				next.ServeHTTP(w, r)
				return
			}
		}
	}
	req.Location = loc + ".real"
	b, _ := json.Marshal(req)
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	var ans protocol.CommitResponse
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &ans) != nil {
		CopyAnswer(w, rec)
		return
	}
	cut, _ := json.Marshal(map[string]any{"checkpoint_id": req.CheckpointID, "real": req.Location})
	sum := sha256.Sum256(cut)
	manifest, _ := json.Marshal(map[string]string{"checkpoint_id": req.CheckpointID, "digest": hex.EncodeToString(sum[:])})
	if os.MkdirAll(loc, 0o755) != nil || os.WriteFile(filepath.Join(loc, "cut.json"), cut, 0o644) != nil ||
		os.WriteFile(filepath.Join(loc, "manifest.json"), manifest, 0o644) != nil {
		refuse(w, http.StatusInternalServerError, protocol.CodeInternal, "write the plain checkpoint")
		return
	}
	ans.Location = loc
	b, _ = json.Marshal(ans)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// CopyAnswer writes a recorded answer to w.
func CopyAnswer(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// readBody reads r's body and puts it back for the next handler.
func readBody(r *http.Request) []byte {
	body, _ := io.ReadAll(r.Body)
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return body
}

func refuse(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(protocol.ErrorBody{Error: protocol.ErrorDetail{Code: code, Message: msg}})
}
