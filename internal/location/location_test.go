package location_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/location"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "/var/ck", want: "/var/ck"},
		{in: "/var/ck/../x/", want: "/var/x"},
		{in: "file:///var/ck", want: "/var/ck"},
		{in: "file://localhost/var/ck", want: "/var/ck"},
		{in: "s3://b", want: "s3://b"},
		{in: "s3://b/p/q/?region=r&endpoint=http://h:1", want: "s3://b/p/q?region=r&endpoint=http://h:1"},
		{in: "", err: "empty location"},
		{in: "rel/dir", err: "neither an absolute path nor a URL"},
		{in: "file://host/x", err: "want file:///absolute/path"},
		{in: "file:///x?y=1", err: "want file:///absolute/path"},
		{in: "s3:///p", err: "names no bucket"},
		{in: "s3://u:p@b/p", err: "no user info"},
		{in: "s3://b/p/../q", err: "'..' element"},
		{in: "s3://b//p", err: "want a relative"},
		{in: "s3://b?prefix=x", err: "give the key prefix as the URL path"},
		{in: "s3://b?a=%zz", err: "query"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			l, err := location.Parse(tt.in)
			if tt.err != "" {
				require.Error(t, err, "ParseLocation(%q) = %v, %v; want error containing %q", tt.in, l, err, tt.err)
				require.True(t, bytes.Contains([]byte(err.Error()), []byte(tt.err)), "ParseLocation(%q) = %v, %v; want error containing %q", tt.in, l, err, tt.err)
				return
			}
			require.NoError(t, err, "ParseLocation(%q) = %q, %v; want %q", tt.in, l.String(), err, tt.want)
			require.Equal(t, tt.want, l.String(), "ParseLocation(%q) = %q, %v; want %q", tt.in, l.String(), err, tt.want)
		})
	}
}

func TestJoin(t *testing.T) {
	tests := []struct {
		loc   string
		elems []string
		want  string
		err   bool
	}{
		{loc: "/ck", elems: []string{"a", "participants", "0"}, want: "/ck/a/participants/0"},
		{loc: "s3://b?region=r", elems: []string{"a", "b"}, want: "s3://b/a/b?region=r"},
		{loc: "s3://b/p?region=r", elems: []string{"a"}, want: "s3://b/p/a?region=r"},
		{loc: "/ck", elems: []string{".."}, err: true},
		{loc: "/ck", elems: []string{"/abs"}, err: true},
	}
	for _, tt := range tests {
		got, err := location.Join(tt.loc, tt.elems...)
		require.Equal(t, tt.err, err != nil, "Join(%q, %q) = %q, %v; want %q (error %v)", tt.loc, tt.elems, got, err, tt.want, tt.err)
		if !tt.err {
			require.Equal(t, tt.want, got, "Join(%q, %q)", tt.loc, tt.elems)
		}
	}
}
