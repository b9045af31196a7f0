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

// TestRedisSentinelURLRefusals: a --redis through Sentinel (master_set=)
// that petstore cannot serve is bad usage at once, never a start that
// then fails to reach Redis for ever: an empty master set name, and
// rediss://, which rueidis reads as TLS to the master checked against the
// Sentinel's host name, and plain TCP to the Sentinels. The password
// never shows. No Redis needed.
func TestRedisSentinelURLRefusals(t *testing.T) {
	const pw = "Zq9x-sentinel"
	tests := []struct{ url, want string }{
		{"redis://:" + pw + "@127.0.0.1:1/0?master_set=", "master_set"},
		{"rediss://:" + pw + "@127.0.0.1:1/0?master_set=m", "rediss://"},
		{"rediss://:" + pw + "@127.0.0.1:1/0?master_set=m&addr=127.0.0.1:2", "rediss://"},
	}
	db := filepath.Join(t.TempDir(), "x.db")
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.url, pw, "PW"), func(t *testing.T) {
			out, errOut, err := runCLI(t, nil, "serve", "--addr", "127.0.0.1:0", "--admin-addr", "off",
				"--db", db, "--redis", tt.url)
			var msg bytes.Buffer
			code := exitCode(err, &msg)
			if strings.Contains(out+errOut+msg.String(), pw) {
				t.Fatalf("the output shows the password:\n%s%s%s", out, errOut, msg.String())
			}
			if code != 2 || !strings.Contains(msg.String(), tt.want) {
				t.Errorf("exit %d, %q; want 2 naming %s", code, msg.String(), tt.want)
			}
		})
	}
}
