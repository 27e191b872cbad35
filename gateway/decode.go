package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// decode reads r's body into v strictly: one JSON object, no unknown
// field, every value of the right type. Its errors are 400s naming the
// field.
func decode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return badRequest("", fmt.Sprintf("Content-Type %q: want application/json", ct))
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "the body holds more than one JSON value")
	}
	return nil
}

func decodeError(err error) error {
	var (
		syntax  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
		tooBig  *http.MaxBytesError
	)
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("", "empty body: want a JSON object")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON: "+err.Error())
	case errors.As(err, &typeErr):
		return badRequest(typeErr.Field, fmt.Sprintf("%s: JSON %s where %s is wanted", typeErr.Field, typeErr.Value, typeErr.Type))
	case errors.As(err, &tooBig):
		return badRequest("", fmt.Sprintf("body larger than %d bytes", tooBig.Limit))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field, _ := strconv.Unquote(name)
		return badRequest(field, fmt.Sprintf("unknown field %s", name))
	}
	return badRequest("", "bad JSON: "+err.Error())
}

// requestIDPattern is what a request id may hold: it names Temporal
// updates and memos, so it stays short and plain.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func checkRequestID(id string) error {
	if !requestIDPattern.MatchString(id) {
		return badRequest("request_id", fmt.Sprintf("request_id %q: want 1-128 letters, digits, '.', '_', ':' or '-'", id))
	}
	return nil
}

// pathSet is the {set} of r's path, checked.
func pathSet(r *http.Request) (string, error) {
	set := r.PathValue("set")
	if err := rollout.ValidateSet(set); err != nil {
		return "", badRequest("set", err.Error())
	}
	return set, nil
}

// queryInt reads an optional integer query parameter within [lo, hi].
func queryInt(r *http.Request, name string, def, lo, hi int) (int, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return def, nil
	}
	v, err := strconv.Atoi(raw)
	if err != nil || v < lo || v > hi {
		return 0, badRequest(name, fmt.Sprintf("%s %q: want an integer in %d..%d", name, raw, lo, hi))
	}
	return v, nil
}

// queryBool reads an optional boolean query parameter: "true" or "false"
// (false when absent).
func queryBool(r *http.Request, name string) (bool, error) {
	switch raw := r.URL.Query().Get(name); raw {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, badRequest(name, fmt.Sprintf("%s %q: want true or false", name, raw))
	}
}

// duration parses an optional Go duration field (zero when empty).
func duration(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, badRequest(field, fmt.Sprintf("%s %q: want a non-negative Go duration such as \"90s\" or \"5m\"", field, v))
	}
	return d, nil
}
