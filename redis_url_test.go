package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestRedisURLWithRawPassword: a --redis password with a raw /, ? or #
// before an @ is read by Go's URL parser (the one parser here) as a host
// and a path, query or fragment, which a message or the log would show. It
// is bad usage, with a hint to percent-encode and no part of the password.
// No Redis needed.
func TestRedisURLWithRawPassword(t *testing.T) {
	tests := []struct{ url, password string }{
		{"redis://u:12/34@127.0.0.1:1/0", "12/34"},
		{"redis://u:12?34@127.0.0.1:1/0", "12?34"},
		{"redis://u:12#34@127.0.0.1:1/0", "12#34"},
		{"redis://:Zq9x@127.0.0.1:1/0#Kw7", "Zq9x"}, // the password shows masked; the fragment is refused
	}
	db := filepath.Join(t.TempDir(), "x.db") // not the subtests': their names hold '#'
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.url, tt.password, "PW"), func(t *testing.T) {
			out, errOut, err := runCLI(t, nil, "serve", "--addr", "127.0.0.1:0", "--admin-addr", "off",
				"--db", db, "--redis", tt.url)
			var msg bytes.Buffer
			code := exitCode(err, &msg)
			if part := passwordPart(out+errOut+msg.String(), tt.password); part != "" {
				t.Fatalf("the output shows %q of the password:\n%s%s%s", part, out, errOut, msg.String())
			}
			if code != 2 || !strings.Contains(msg.String(), "percent-encode") {
				t.Errorf("exit %d, %q; want 2 asking to percent-encode", code, msg.String())
			}
		})
	}
}
