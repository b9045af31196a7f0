package main

import (
	"crypto/sha256"
	"strings"
	"testing"
)

func TestBearerToken(t *testing.T) {
	tests := []struct {
		header, want string
		ok           bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BeArEr abc", "abc", true},
		{"Bearer  abc", " abc", true}, // taken as is, so it fails the key format
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic abc", "", false},
		{"abc", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := bearerToken(tt.header)
		if got != tt.want || ok != tt.ok {
			t.Errorf("bearerToken(%q) = %q, %v; want %q, %v", tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

func TestKeyFormat(t *testing.T) {
	for _, env := range environments {
		seen := map[string]bool{}
		for range 100 {
			k := newKeySecret(env)
			if !validKeyFormat(k, env) {
				t.Fatalf("newKeySecret(%s) = %q, which validKeyFormat refuses", env, k)
			}
			other := "staging"
			if env == "staging" {
				other = "production"
			}
			if validKeyFormat(k, other) {
				t.Errorf("%q passes as a %s key", k, other)
			}
			if seen[k] {
				t.Fatalf("newKeySecret repeated %q", k)
			}
			seen[k] = true
		}
	}
	good := "ps_live_" + strings.Repeat("a", 32)
	tests := []struct {
		key  string
		want bool
	}{
		{good, true},
		{"ps_live_" + strings.Repeat("Z9", 60), true},
		{"ps_live_" + strings.Repeat("a", 31), false},
		{"ps_live_" + strings.Repeat("a", 121), false},
		{"PS_LIVE_" + strings.Repeat("a", 32), false},
		{good + " ", false},
		{good + "-", false},
		{"ps_live_" + strings.Repeat("é", 32), false},
		{"ps_test_" + strings.Repeat("a", 32), false},
		{"", false},
	}
	for _, tt := range tests {
		if got := validKeyFormat(tt.key, "production"); got != tt.want {
			t.Errorf("validKeyFormat(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

// Every authenticated request hashes its key: that must not allocate.
func TestHashKeyDoesNotAllocate(t *testing.T) {
	key := newKeySecret("production")
	if n := testing.AllocsPerRun(100, func() { hashKey(key) }); n != 0 {
		t.Errorf("hashKey allocates %.0f times", n)
	}
	if hashKey(key) != sha256.Sum256([]byte(key)) {
		t.Error("hashKey is not the SHA-256 of the key")
	}
}
