// Package strictjson decodes JSON the way untrusted input must be read:
// one value, no unknown fields, nothing after it.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Decode decodes exactly one JSON value from b into v, refusing unknown
// fields and trailing data.
func Decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
