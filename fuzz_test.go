package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// fuzzBodySeeds are request bodies that every decoding target starts from:
// valid ones, each way of being broken, and the edges of the limits.
var fuzzBodySeeds = []string{
	`{"name":"Dog"}`,
	`{"name":"  Dog\t","description":"Loyal"}`,
	`{"name":"Rex","categoryId":1,"status":"sold"}`,
	`{"petId":1,"quantity":100}`,
	`{"name":"école","description":""}`,
	`{"name":"Straße","description":null}`,
	`{"name":"` + strings.Repeat("ü", 100) + `"}`,
	`{"name":"` + strings.Repeat("x", 101) + `"}`,
	`{"name":"a\u0000b"}`,
	`{"name":"a\u0085b"}`,
	"{\"name\":\"a\xffb\"}",
	"\xef\xbb\xbf{\"name\":\"Dog\"}",
	`{"name":"a","name":"b"}`,
	`{"NAME":"a"}`,
	`{"name":"a","n\u0061me":"b"}`,
	`{"name":1e400,"categoryId":1e400,"petId":99999999999999999999,"quantity":-0}`,
	`{"categoryId":9223372036854775807,"quantity":1.5}`,
	`{"name":"\ud800"}`,
	`{"name":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
	`{"description":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}`,
	`{"name":"Dog"} {}`,
	`{"name":"Dog"}x`,
	`{"name":`,
	`{`,
	`[]`,
	`null`,
	`"Dog"`,
	` `,
	``,
	`{"colour":"red"}`,
	`{"name":"p","categoryId":"1","status":5}`,
	`{"petId":{},"quantity":[]}`,
	`{"a":{"x":1,"x":2}}`,
	`{"name":"x","description":"` + strings.Repeat("d", 1001) + `"}`,
	`{"name":"x","description":"a\u0000b"}`,
}

// knownCodes are the Error codes that each status may carry (DECISIONS.md, section 2).
var knownCodes = map[int][]string{
	400: {"invalid_json", "validation_failed"},
	413: {"payload_too_large"},
	415: {"unsupported_media_type"},
}

// fuzzDecode runs decodeJSON on body as a POST with Content-Type
// application/json and checks the error it gives, if any. It returns
// whether the body was accepted.
func fuzzDecode(t *testing.T, body []byte, dst any) bool {
	t.Helper()
	r := httptest.NewRequest("POST", "/v1/x", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	err := decodeJSON(httptest.NewRecorder(), r, dst)
	if err == nil {
		if len(body) > maxBodyBytes {
			t.Fatalf("accepted a body of %d bytes", len(body))
		}
		if !json.Valid(body) || !utf8.Valid(body) {
			t.Fatalf("accepted a body that is not valid JSON: %q", body)
		}
		return true
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		t.Fatalf("decodeJSON error %T %v is not an *apiError", err, err)
	}
	checkAPIError(t, ae, 400, 413, 415)
	if len(body) > maxBodyBytes && ae.Status != 413 {
		t.Fatalf("a body of %d bytes got %d, want 413", len(body), ae.Status)
	}
	if ae.Status == 413 && len(body) <= maxBodyBytes {
		t.Fatalf("a body of %d bytes got 413", len(body))
	}
	return false
}

// checkAPIError checks that e has one of the statuses and a code that status may carry.
func checkAPIError(t *testing.T, e *apiError, statuses ...int) {
	t.Helper()
	if !slices.Contains(statuses, e.Status) {
		t.Fatalf("status %d (%v), want one of %v", e.Status, e, statuses)
	}
	if !slices.Contains(knownCodes[e.Status], e.Code) {
		t.Fatalf("code %q with status %d (%v)", e.Code, e.Status, e)
	}
	if e.Message == "" {
		t.Fatalf("no message: %+v", e)
	}
}

// checkName checks a name that passed validation: valid UTF-8, trimmed,
// 1 to 100 code points, no control characters.
func checkName(t *testing.T, name string) {
	t.Helper()
	if !utf8.ValidString(name) {
		t.Fatalf("name %q is not valid UTF-8", name)
	}
	if n := utf8.RuneCountInString(name); n < 1 || n > maxNameLen {
		t.Fatalf("name %q has %d code points", name, n)
	}
	if strings.TrimSpace(name) != name {
		t.Fatalf("name %q is not trimmed", name)
	}
	if i := strings.IndexFunc(name, unicode.IsControl); i >= 0 {
		t.Fatalf("name %q has a control character at %d", name, i)
	}
}

// checkValidationError checks an error of a validate method.
func checkValidationError(t *testing.T, e *apiError) {
	t.Helper()
	checkAPIError(t, e, 400)
	if e.Code != "validation_failed" {
		t.Fatalf("validation error with code %q", e.Code)
	}
}

func addBodySeeds(f *testing.F, extra ...string) {
	for _, s := range append(fuzzBodySeeds, extra...) {
		f.Add([]byte(s))
	}
	f.Add(append([]byte(`{"name":"big","description":"`), bytes.Repeat([]byte("d"), maxBodyBytes)...))
}

func FuzzDecodeCategory(f *testing.F) {
	addBodySeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var in newCategory
		if !fuzzDecode(t, body, &in) {
			return
		}
		c, verr := in.validate()
		if verr != nil {
			checkValidationError(t, verr)
			return
		}
		checkName(t, c.Name)
		if in.Description != nil && utf8.RuneCountInString(*in.Description) > maxDescriptionLen {
			t.Fatalf("description of %d code points accepted", utf8.RuneCountInString(*in.Description))
		}
		if in.Description != nil && strings.ContainsRune(*in.Description, 0) {
			t.Fatalf("description with U+0000 accepted")
		}
		if c.Description != in.Description {
			t.Fatalf("description %v validated into %v", in.Description, c.Description)
		}
	})
}

func FuzzDecodePet(f *testing.F) {
	addBodySeeds(f,
		`{"name":"Rex","categoryId":1}`,
		`{"name":"Rex","categoryId":0}`,
		`{"name":"Rex","categoryId":-9223372036854775808,"status":"pending"}`,
		`{"name":"Rex","categoryId":1,"status":"AVAILABLE"}`,
		`{"name":"Rex","categoryId":1,"status":null}`,
		`{"name":"Rex","categoryId":1,"categoryId":2}`,
	)
	f.Fuzz(func(t *testing.T, body []byte) {
		var in newPet
		if !fuzzDecode(t, body, &in) {
			return
		}
		p, verr := in.validate()
		if verr != nil {
			checkValidationError(t, verr)
			return
		}
		checkName(t, p.Name)
		if p.CategoryID < 1 {
			t.Fatalf("categoryId %d accepted", p.CategoryID)
		}
		if !slices.Contains(petStatuses, p.Status) {
			t.Fatalf("status %q accepted", p.Status)
		}
	})
}

func FuzzDecodeOrder(f *testing.F) {
	addBodySeeds(f,
		`{"petId":1,"quantity":1}`,
		`{"petId":1,"quantity":0}`,
		`{"petId":1,"quantity":101}`,
		`{"petId":-1,"quantity":1}`,
		`{"petId":1}`,
		`{"quantity":1}`,
		`{"petId":1,"quantity":1,"status":"placed"}`,
		`{"petId":1e0,"quantity":1.0}`,
	)
	f.Fuzz(func(t *testing.T, body []byte) {
		var in newOrder
		if !fuzzDecode(t, body, &in) {
			return
		}
		o, verr := in.validate()
		if verr != nil {
			checkValidationError(t, verr)
			return
		}
		if in.PetID == nil || *in.PetID < 1 {
			t.Fatalf("petId %v accepted", in.PetID)
		}
		if in.Quantity == nil || *in.Quantity < 1 || *in.Quantity > maxOrderQuantity {
			t.Fatalf("quantity %v accepted", in.Quantity)
		}
		if o.PetID != int64(*in.PetID) || o.Quantity != int64(*in.Quantity) || o.Status != "placed" {
			t.Fatalf("%+v validated into %+v", in, o)
		}
	})
}

func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{
		"Bearer abc", "bearer abc", "BEARER abc", "BeArEr abc", "Bearer  abc", "Bearer", "Bearer ",
		"Basic abc", "abc", "", " Bearer abc", "Bearer\tabc", "Bearer abc ", "Bearer ps_live_" + strings.Repeat("a", 40),
		"Bearer\x00 abc", "Bearér abc", "\u212Aearer abc", "Bearer Bearer abc", "Bearerabc",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		token, ok := bearerToken(h)
		if !ok {
			if token != "" {
				t.Fatalf("bearerToken(%q) = %q, false", h, token)
			}
			return
		}
		if token == "" {
			t.Fatalf("bearerToken(%q) = \"\", true", h)
		}
		scheme, found := strings.CutSuffix(h, " "+token)
		if !found || !strings.EqualFold(scheme, "Bearer") || h != scheme+" "+token {
			t.Fatalf("bearerToken(%q) = %q: the header is not <Bearer> <token>", h, token)
		}
		// EqualFold folds Unicode too: the scheme must still be six ASCII letters.
		if len(scheme) != len("Bearer") {
			t.Fatalf("bearerToken(%q) accepted the scheme %q", h, scheme)
		}
	})
}

func FuzzKeyFormat(f *testing.F) {
	for _, s := range []string{
		"ps_live_" + strings.Repeat("a", 32), "ps_test_" + strings.Repeat("Z", 40), "ps_live_" + strings.Repeat("9", 120),
		"ps_live_" + strings.Repeat("a", 31), "ps_live_" + strings.Repeat("a", 121), "PS_LIVE_" + strings.Repeat("a", 32),
		"ps_live_" + strings.Repeat("a", 32) + " ", "ps_live_" + strings.Repeat("é", 32), "ps_live_", "", "ps_", "ps_live",
		"ps_live_" + strings.Repeat("a", 31) + "\x00", newKeySecret("production"), newKeySecret("staging"),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		valid := 0
		for _, env := range environments {
			if !validKeyFormat(k, env) {
				continue
			}
			valid++
			checkKeyShape(t, k, env)
		}
		if valid > 1 {
			t.Fatalf("%q is a key of both environments", k)
		}
	})
}

// checkKeyShape checks that k has the prefix of env, 40 to 128 bytes and
// only base62 characters after the prefix.
func checkKeyShape(t *testing.T, k, env string) {
	t.Helper()
	p := keyPrefix(env)
	if !strings.HasPrefix(k, p) {
		t.Fatalf("%q passes as a %s key without the prefix %q", k, env, p)
	}
	if len(k) < 40 || len(k) > 128 {
		t.Fatalf("%q passes as a %s key with length %d", k, env, len(k))
	}
	for _, c := range []byte(k[len(p):]) {
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			t.Fatalf("%q passes as a %s key with the character %q", k, env, c)
		}
	}
}

func TestNewKeySecretIsValid(t *testing.T) {
	for _, env := range environments {
		for range 1000 {
			k := newKeySecret(env)
			if !validKeyFormat(k, env) {
				t.Fatalf("validKeyFormat(newKeySecret(%s)) = false for %q", env, k)
			}
			checkKeyShape(t, k, env)
		}
	}
}

func FuzzFoldName(f *testing.F) {
	for _, s := range []string{
		"Dog", "dog", "DOG", "ÉCOLE", "école", "e\u0301cole", "Straße", "STRASSE", "ẞ", "Σίσυφος", "ΣΊΣΥΦΟΣ", "ς",
		"İstanbul", "ıi", "K", "ǅ", "ǰ", "ΐ", "ﬃ", "α\u0345", "ᾳ", "Å", "Å", "🐶", "", "\u0000", "a\u0307\u0323",
		"ｄｏｇ", "dog\u200b", "d\u00adog", "\u202edog", "❤️ pets", "👨\u200d👩\u200d👧", "a\u0323\u034f\u0307", "\uffa0", "x²", "㍱",
	} {
		f.Add(s)
	}
	// Invisible code points to insert: compareName must not see them.
	ignorables := []rune{0x00AD, 0x034F, 0x200B, 0x200D, 0x2060, 0xFE0F, 0xFEFF, 0x202E, 0x3164, 0xE0001, 0xE0100}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			foldName(s) // must not panic
			compareName(s)
			return
		}
		checkCompareName(t, s, ignorables)
		k := foldName(s)
		if full := foldUnicode(s); k != full {
			t.Fatalf("foldName(%+q) = %+q, but the full folding gives %+q", s, k, full)
		}
		if again := foldName(k); again != k {
			t.Fatalf("foldName is not idempotent: foldName(%+q) = %+q, foldName of that = %+q", s, k, again)
		}
		upper, lower := strings.ToUpper(s), strings.ToLower(s)
		if strings.ToLower(upper) != lower || strings.ToUpper(lower) != upper {
			return // not a plain case pair (ı/I, ſ/S, ...)
		}
		if fu, fl := foldName(upper), foldName(lower); fu != fl {
			t.Fatalf("case variants fold apart: foldName(%+q) = %+q, foldName(%+q) = %+q", upper, fu, lower, fl)
		}
		if cu, cl := compareName(upper), compareName(lower); cu != cl {
			t.Fatalf("case variants compare apart: compareName(%+q) = %+q, compareName(%+q) = %+q", upper, cu, lower, cl)
		}
	})
}

// checkCompareName holds compareName, on a valid string s, to its
// properties: its ASCII shortcut agrees with the full path; it is
// idempotent and holds no default-ignorable code point; an ignorable
// inserted anywhere changes nothing; and full-width ASCII compares as
// ASCII.
func checkCompareName(t *testing.T, s string, ignorables []rune) {
	t.Helper()
	k := compareName(s)
	if full := compareUnicode(s); k != full {
		t.Fatalf("compareName(%+q) = %+q, but the full path gives %+q", s, k, full)
	}
	if again := compareName(k); again != k {
		t.Fatalf("compareName is not idempotent: compareName(%+q) = %+q, compareName of that = %+q", s, k, again)
	}
	if i := strings.IndexFunc(k, defaultIgnorable); i >= 0 {
		t.Fatalf("compareName(%+q) = %+q holds an ignorable at byte %d", s, k, i)
	}
	// Insert one at a rune boundary that s itself chooses.
	at := 0
	if n := utf8.RuneCountInString(s); n > 0 {
		at = len(s) % (n + 1)
	}
	i := 0
	for range at {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	ig := ignorables[len(s)%len(ignorables)]
	if with := s[:i] + string(ig) + s[i:]; compareName(with) != k {
		t.Fatalf("compareName(%+q) = %+q, but with U+%04X inserted, compareName(%+q) = %+q", s, k, ig, with, compareName(with))
	}
	wide := strings.Map(func(r rune) rune {
		if r >= 0x21 && r <= 0x7E {
			return r - 0x21 + 0xFF01
		}
		return r
	}, s)
	if cw := compareName(wide); cw != k {
		t.Fatalf("full width compares apart: compareName(%+q) = %+q, compareName(%+q) = %+q", s, k, wide, cw)
	}
}

// FuzzJSONShape holds checkJSONShape, a one-pass byte scanner, to the
// answers of tokenJSONShape, the json.Decoder.Token walk it replaced, on
// every valid JSON body in UTF-8 (what decodeJSON hands it): the same top-level keys, and an error exactly when
// the walk finds one. On malformed input it must only end without panic
// (decodeJSON lets the decoder judge such a body).
func FuzzJSONShape(f *testing.F) {
	addBodySeeds(f, `{"a":{"b":1,"b":2}}`, `{"a\"b":1,"a\u0022b":2}`, `{"x":"{\"y\":1,\"y\":2}"}`,
		`{"a":`+strings.Repeat(`[`, 40)+strings.Repeat(`]`, 40)+`}`, `[{"a":1},{"a":1}]`)
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := checkJSONShape(body)
		if !json.Valid(body) || !utf8.Valid(body) { // decodeJSON refuses invalid UTF-8 first
			return
		}
		wantKeys, wantErr := tokenJSONShape(body)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, the token walk says %v", body, err, wantErr)
		}
		if err == nil && !slices.Equal(keys, wantKeys) {
			t.Fatalf("%q: keys %q, the token walk says %q", body, keys, wantKeys)
		}
	})
}

// tokenJSONShape is checkJSONShape as it was first written, kept as the
// reference of FuzzJSONShape.
func tokenJSONShape(body []byte) (topKeys []string, _ *apiError) {
	type frame struct {
		keys           map[string]bool
		isObj, wantKey bool
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // a huge number is the decoder's to judge, not a reason to stop here
	for {
		tok, err := dec.Token()
		if err != nil {
			return topKeys, nil
		}
		top := len(stack) - 1
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) == maxJSONDepth {
				return nil, errorf("invalid_json", "the JSON is nested deeper than %d levels", maxJSONDepth)
			}
			isObj := tok == json.Delim('{')
			stack = append(stack, frame{isObj: isObj, wantKey: isObj})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
			top--
		default:
			if top >= 0 && stack[top].wantKey {
				key, _ := tok.(string)
				if stack[top].keys[key] {
					return nil, errorf("invalid_json", "the key %q appears twice in one object", key)
				}
				if top == 0 {
					topKeys = append(topKeys, key)
				}
				if stack[top].keys == nil {
					stack[top].keys = map[string]bool{}
				}
				stack[top].keys[key] = true
				stack[top].wantKey = false
				continue
			}
		}
		// A value ended: its object, if any, wants a key next.
		if top < 0 {
			return topKeys, nil
		}
		if stack[top].isObj {
			stack[top].wantKey = true
		}
	}
}

// refDecode is an independent strict reference: whole body must be one valid
// JSON object (JSON whitespace around it allowed), valid UTF-8, no duplicate
// keys (after unescaping) in any object, depth <= 32, top-level keys exactly
// the struct's json names; then each field's type, checked by hand from a
// decode with json.Number (DECISIONS.md section 18: no null, and an integer
// is any number whose exact value is one).
func refDecode(body []byte, dst any) string {
	if !utf8.Valid(body) || !json.Valid(body) {
		return "invalid_json"
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return "invalid_json"
	}
	if refLoneSurrogate(body) {
		return "invalid_json"
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type fr struct {
		obj, wantKey bool
		keys         map[string]bool
	}
	var st []fr
	var top []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "invalid_json"
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if len(st) == maxJSONDepth {
					return "invalid_json"
				}
				st = append(st, fr{obj: d == '{', wantKey: d == '{', keys: map[string]bool{}})
				continue
			default:
				st = st[:len(st)-1]
			}
		} else if n := len(st); n > 0 && st[n-1].obj && st[n-1].wantKey {
			k := tok.(string)
			if st[n-1].keys[k] {
				return "invalid_json"
			}
			st[n-1].keys[k] = true
			st[n-1].wantKey = false
			if n == 1 {
				top = append(top, k)
			}
			continue
		}
		if n := len(st); n > 0 && st[n-1].obj {
			st[n-1].wantKey = true
		}
	}
	known := jsonFieldNames(dst)
	for _, k := range top {
		if !slices.Contains(known, k) {
			return "validation_failed"
		}
	}
	// Types, by hand: each field's JSON value must be of its type, never
	// null, and an integer field's number an integer within int64 by
	// exact rational arithmetic (refInteger).
	var fields map[string]any
	fdec := json.NewDecoder(bytes.NewReader(body))
	fdec.UseNumber()
	if err := fdec.Decode(&fields); err != nil {
		return "other:" + err.Error()
	}
	dv := reflect.ValueOf(dst).Elem()
	for i := range dv.NumField() {
		name, _, _ := strings.Cut(dv.Type().Field(i).Tag.Get("json"), ",")
		raw, ok := fields[name]
		if !ok {
			continue
		}
		elem := dv.Field(i).Type().Elem()
		v := reflect.New(elem)
		switch x := raw.(type) {
		case string:
			if elem.Kind() != reflect.String {
				return "validation_failed"
			}
			v.Elem().SetString(x)
		case json.Number:
			n, ok := refInteger(string(x))
			if elem.Kind() != reflect.Int64 || !ok {
				return "validation_failed"
			}
			v.Elem().SetInt(n)
		default: // null, a bool, an array or an object
			return "validation_failed"
		}
		dv.Field(i).Set(v)
	}
	return "ok"
}

// refLoneSurrogate is loneSurrogate written another way, for refDecode:
// on valid JSON, each string literal's escapes by a regular expression,
// a high surrogate's \u escape to be followed at once by a low one's.
func refLoneSurrogate(body []byte) bool {
	for _, lit := range refStringRE.FindAll(body, -1) {
		high, end := false, -1 // a high surrogate waits for its pair, which must start at end
		for _, m := range refEscapeRE.FindAllSubmatchIndex(lit, -1) {
			var u uint64 = 0x10000 // not a \u escape
			if m[2] >= 0 {
				u, _ = strconv.ParseUint(string(lit[m[2]:m[3]]), 16, 32)
			}
			low := u >= 0xDC00 && u <= 0xDFFF
			if high && (m[0] != end || !low) {
				return true
			}
			if !high && low {
				return true
			}
			high = !high && u >= 0xD800 && u <= 0xDBFF
			end = m[1]
		}
		if high {
			return true
		}
	}
	return false
}

var (
	refStringRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	refEscapeRE = regexp.MustCompile(`\\(?:u([0-9a-fA-F]{4})|.)`)
)

// refInteger returns the value of a JSON number literal if it is an
// integer within int64, worked out with math/big's exact rationals. An
// exponent far beyond the literal's length decides without them (big.Rat
// would build 10^exp): the value is then zero, or too large, or between
// zero and one.
func refInteger(lit string) (int64, bool) {
	mant, exp, _ := strings.Cut(strings.ToLower(lit), "e")
	if e, err := strconv.ParseInt(exp, 10, 64); exp != "" && (err != nil || e > int64(2*len(lit)+40) || e < -int64(2*len(lit)+40)) {
		zero := strings.Trim(mant, "-0.") == ""
		return 0, zero
	}
	r, ok := new(big.Rat).SetString(lit)
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	return r.Num().Int64(), true
}

func gotDecode(body []byte, dst any) string {
	r := httptest.NewRequest("POST", "/v1/x", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	err := decodeJSON(httptest.NewRecorder(), r, dst)
	if err == nil {
		return "ok"
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		return "nonapi:" + err.Error()
	}
	if ae.Status == 413 {
		return "413"
	}
	return ae.Code
}

// FuzzDecodeDiff holds decodeJSON, for each body type, to refDecode: the
// same answer (ok, invalid_json, validation_failed or 413) and, when both
// accept a body, the same decoded value. The fast one-pass shape check and
// the exact-key rule are what it watches: FuzzJSONShape compares two
// checkers that share that rule, and the FuzzDecode* targets only check
// that an answer is one of the allowed ones.
func FuzzDecodeDiff(f *testing.F) {
	addBodySeeds(f, `{"name":"a","na\u006de":"b"}`, `{"\u212aey":1}`, `{"ſtatus":"sold"}`, `{"name":1}x`,
		`{"petId":1.0,"quantity":1e2}`, `{"petId":100e-2,"quantity":0.1e1}`, `{"petId":1,"quantity":1.00000000000000000001}`,
		`{"petId":9223372036854775807,"quantity":-9223372036854775808}`, `{"petId":9223372036854775808,"quantity":-9223372036854775809}`,
		`{"petId":9.223372036854775807e18,"quantity":-0.0}`, `{"petId":1e999999999,"quantity":1e-999999999}`,
		`{"petId":0e99999999999,"quantity":10000000000000000000000e-22}`, `{"petId":null}`, `{"name":null,"description":null}`,
		`{"status":null,"categoryId":"1"}`, `{"quantity":true}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > maxBodyBytes {
			return
		}
		for _, mk := range []func() any{func() any { return new(newCategory) }, func() any { return new(newPet) }, func() any { return new(newOrder) }} {
			d1, d2 := mk(), mk()
			want := refDecode(body, d1)
			got := gotDecode(body, d2)
			if want != got {
				t.Fatalf("%T %q: got %s, reference %s", d1, body, got, want)
			}
			if got == "ok" && !reflect.DeepEqual(d1, d2) {
				t.Fatalf("%T %q: decoded differently", d1, body)
			}
		}
	})
}

// FuzzPatternsMatchServer holds the document's patterns to the server's
// checks on any string: the name pattern to validName, the
// Idempotency-Key pattern to idempotencyKey (on values without the white
// space around them that HTTP trims).
func FuzzPatternsMatchServer(f *testing.F) {
	for _, s := range []string{"Dog", "  Dog  ", "", " ", "a\u200bb", "a\u200db", "\u2764\ufe0f", "\"abc\"", `"a\"b"`, "a\x00b",
		strings.Repeat("x", 100), " " + strings.Repeat("x", 100) + " ", strings.Repeat("x", 256), "\u3000x\u2029", "x\U000e0001"} {
		f.Add(s)
	}
	name := regexp.MustCompile(namePattern())
	key := regexp.MustCompile(idemKeyPattern())
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // a JSON string decodes to valid UTF-8
		}
		v := s
		_, err := validName("name", &v)
		if got := name.MatchString(s); got != (err == nil) {
			t.Fatalf("name %+q: the pattern says %v, validName %v", s, got, err)
		}
		if s != strings.Trim(s, " \t") {
			return
		}
		_, _, kerr := idempotencyKey(http.Header{"Idempotency-Key": {s}})
		if got := key.MatchString(s); got != (kerr == nil) {
			t.Fatalf("key %q: the pattern says %v, idempotencyKey %v", s, got, kerr)
		}
	})
}
