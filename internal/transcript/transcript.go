// Package transcript defines what a rollout's conversation is made of: items
// (Chat Completions messages), the tool calls in them, the generation record
// of a model call (token ids, log-probs, policy version), and the SHA-256
// digests that name each of them. It does no I/O, so workflow code can use
// it; package transcriptstore keeps the blobs these digests name.
package transcript

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Digest names a stored blob: "sha256:" followed by 64 hex digits. The empty
// Digest is the empty conversation.
type Digest string

// DigestOf returns the digest of data.
func DigestOf(data []byte) Digest {
	sum := sha256.Sum256(data)
	return Digest("sha256:" + hex.EncodeToString(sum[:]))
}

// Validate reports whether d is a well-formed, non-empty digest.
func (d Digest) Validate() error {
	hexPart, ok := strings.CutPrefix(string(d), "sha256:")
	if !ok || len(hexPart) != 64 {
		return fmt.Errorf("transcript: malformed digest %q", d)
	}
	if _, err := hex.DecodeString(hexPart); err != nil || strings.ToLower(hexPart) != hexPart {
		return fmt.Errorf("transcript: malformed digest %q", d)
	}
	return nil
}

// Item is one conversation message, in Chat Completions terms.
type Item struct {
	Role       string     `json:"role"` // system, user, assistant, tool
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// Generation names the Generation record of the model call that wrote
	// this (assistant) item: its token ids, log-probs and policy version.
	// Tokens live in a sibling blob so the item stays small and an item
	// without a record (capture off) keeps its old digest.
	Generation Digest `json:"generation,omitempty"`
}

// ToolCall is a function call requested by the model.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Errors a caller can tell apart: a missing blob, and a blob or chain whose
// content does not match its name or does not decode. Neither heals by
// retrying.
var (
	ErrNotFound = errors.New("transcript: not found")
	ErrCorrupt  = errors.New("transcript: corrupt")
)
