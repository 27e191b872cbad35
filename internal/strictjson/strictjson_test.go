package strictjson_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/strictjson"
)

func TestDecode(t *testing.T) {
	type v struct {
		A int `json:"a"`
	}
	for _, tt := range []struct {
		in, wantErr string
		want        v
	}{
		{in: `{"a":1}`, want: v{A: 1}},
		{in: ` {"a":2} `, want: v{A: 2}},
		{in: `{"a":1,"b":2}`, wantErr: "unknown field"},
		{in: `{"a":1} {"a":2}`, wantErr: "trailing data"},
		{in: `{"a":"x"}`, wantErr: "cannot unmarshal"},
	} {
		var got v
		err := strictjson.Decode([]byte(tt.in), &got)
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
}
