package protocol_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

func TestValidateParticipants(t *testing.T) {
	tests := []struct {
		name    string
		urls    []string
		want    []string
		wantErr string
	}{
		{"trimmed, order kept", []string{" http://b:2/ ", "https://a:1"}, []string{"http://b:2", "https://a:1"}, ""},
		{"none", nil, nil, "at least one"},
		{"empty", []string{""}, nil, "participant 0"},
		{"no scheme", []string{"a:1"}, nil, "not an http:// or https:// URL"},
		{"no host", []string{"http://"}, nil, "not an http:// or https:// URL"},
		{"twice, once with a slash", []string{"http://a:1", "http://a:1/"}, nil, "participant 1: http://a:1 is listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := protocol.ValidateParticipants(tt.urls)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
