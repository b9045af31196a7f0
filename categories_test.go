package main

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name    string
		in      *string
		want    string
		wantErr string
	}{
		{"absent", nil, "", "required"},
		{"plain", str("Dog"), "Dog", ""},
		{"trimmed", str(" \t Dog \n"), "Dog", ""},
		{"inner spaces kept", str("Guinea  pig"), "Guinea  pig", ""},
		{"unicode spaces trimmed", str("\u00a0Dog\u2003"), "Dog", ""},
		{"empty", str(""), "", "empty"},
		{"blank", str("   "), "", "empty"},
		{"100 code points", str(strings.Repeat("ß", 100)), strings.Repeat("ß", 100), ""},
		{"101 code points", str(strings.Repeat("ß", 101)), "", "at most 100"},
		{"100 after trim", str("  " + strings.Repeat("a", 100) + "  "), strings.Repeat("a", 100), ""},
		{"tab inside", str("a\tb"), "", "control"},
		{"NUL", str("a\x00b"), "", "control"},
		{"C1 control", str("a\u0085b"), "", "control"},
		{"emoji", str("🐶"), "🐶", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := validName("name", tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Message, tt.wantErr) || err.Code != "validation_failed" {
					t.Fatalf("validName = %q, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("validName = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFoldName(t *testing.T) {
	same := [][2]string{
		{"Dog", "dog"},
		{"DOG", "dOg"},
		{"ÉCOLE", "école"},
		{"école", "e\u0301cole"}, // precomposed and combining accent
		{"Straße", "STRASSE"},
		{"Σίσυφος", "ΣΊΣΥΦΟΣ"},
	}
	for _, p := range same {
		if foldName(p[0]) != foldName(p[1]) {
			t.Errorf("foldName(%q) = %q, foldName(%q) = %q; want equal", p[0], foldName(p[0]), p[1], foldName(p[1]))
		}
	}
	for _, p := range [][2]string{{"Dog", "Dogs"}, {"cote", "côte"}} {
		if foldName(p[0]) == foldName(p[1]) {
			t.Errorf("foldName(%q) == foldName(%q); want distinct", p[0], p[1])
		}
	}
}
