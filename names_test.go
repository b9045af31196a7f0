package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// jsonName is s as a JSON string, escaped so that every code point outside
// ASCII is sent as \uXXXX, as the clients sent them.
func jsonName(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// errorMessage checks that r is an Error of status and code and returns
// its message.
func errorMessage(t *testing.T, r response, status int, code string) string {
	t.Helper()
	wantError(t, r, status, code)
	return decode[apiError](t, r).Message
}

// TestLookalikeNames: with dog stored, its lookalikes are 400
// (an invisible or bidi code point, named in the message) or 409 (the same
// name under NFKC and case folding, naming dog); emoji with a variation
// selector or a zero-width joiner stay valid, and Straße still equals
// STRASSE. Pet names follow the same character rules, but need not be
// unique. On both stores.
func TestLookalikeNames(t *testing.T) {
	ts := startServer(t)
	create := func(name string) response {
		t.Helper()
		return ts.do(t, "POST", "/v1/categories", ts.key, `{"name":`+jsonName(name)+`}`)
	}
	dog := create("dog")
	if dog.status != 201 {
		t.Fatalf("dog: %d %s", dog.status, dog.body)
	}
	for _, tt := range []struct{ name, point string }{
		{"dog\u200b", "U+200B"},
		{"\u200bdog", "U+200B"},
		{"d\u00adog", "U+00AD"},
		{"dog\ufeff", "U+FEFF"},
		{"\u202edog", "U+202E"},
		{"dog\u2060", "U+2060"},
		{"d\u034fog", "U+034F"},
		{"\u2066dog\u2069", "U+2066"},
		{"dog\u061c", "U+061C"},
	} {
		m := errorMessage(t, create(tt.name), http.StatusBadRequest, "validation_failed")
		if !strings.Contains(m, tt.point) {
			t.Errorf("%+q: message %q does not name %s", tt.name, m, tt.point)
		}
	}
	for _, name := range []string{"ｄｏｇ", "ＤＯＧ", "DOG", "ｄog"} {
		if m := errorMessage(t, create(name), http.StatusConflict, "conflict"); !strings.Contains(m, `"dog"`) {
			t.Errorf("%+q: message %q does not name dog, which holds the name", name, m)
		}
	}
	for _, tt := range []struct{ made, same string }{
		{"❤️ pets", "❤ pets"},      // U+2764 U+FE0F: the variation selector is valid, and ignored
		{"👨\u200d👩\u200d👧", "👨👩👧"}, // a family: the joiners are valid, and ignored
		{"Straße", "STRASSE"},
		{"ﬁsh", "FISH"}, // a compatibility ligature
	} {
		if r := create(tt.made); r.status != 201 {
			t.Errorf("%+q: %d %s, want 201", tt.made, r.status, r.body)
			continue
		}
		if m := errorMessage(t, create(tt.same), http.StatusConflict, "conflict"); !strings.Contains(m, strconv.Quote(tt.made)) {
			t.Errorf("%+q: message %q does not name %+q", tt.same, m, tt.made)
		}
	}

	id := decode[Category](t, dog).ID
	pet := func(name string) response {
		t.Helper()
		return ts.do(t, "POST", "/v1/pets", ts.key, fmt.Sprintf(`{"name":%s,"categoryId":%d}`, jsonName(name), id))
	}
	for _, name := range []string{"rex\u200b", "\u202erex", "r\u00adex"} {
		errorMessage(t, pet(name), http.StatusBadRequest, "validation_failed")
	}
	for _, name := range []string{"rex", "ｒｅｘ", "❤️ rex", "👨\u200d👩\u200d👧"} {
		if r := pet(name); r.status != 201 {
			t.Errorf("pet %+q: %d %s, want 201 (pet names need not be unique)", name, r.status, r.body)
		}
	}
}

// migrateTestDB brings db (either store) to schema version v, as an older
// petstore would have left it.
func migrateTestDB(t *testing.T, db string, v uint) {
	t.Helper()
	var conn *sql.DB
	var drv database.Driver
	var err error
	dir, name := "migrations/sqlite", "sqlite"
	if strings.HasPrefix(db, "postgres") {
		dir, name = "migrations/postgres", "pgx5"
		cfg, perr := pgx.ParseConfig(db)
		if perr != nil {
			t.Fatal(perr)
		}
		conn = stdlib.OpenDB(*cfg)
		drv, err = migratepgx.WithInstance(conn, &migratepgx.Config{})
	} else {
		if conn, err = sql.Open("sqlite", sqliteDSN(db, false, time.Second)); err != nil {
			t.Fatal(err)
		}
		drv, err = migratesqlite.WithInstance(conn, &migratesqlite.Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	src, err := iofs.New(migrationFiles, dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, name, drv)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close() // closes conn
	if err := m.Migrate(v); err != nil {
		t.Fatalf("migrate to %d: %v", v, err)
	}
}

// execTestDB runs statements on db (either store), written with $1-style
// parameters.
func execTestDB(t *testing.T, db, query string, args ...any) {
	t.Helper()
	var conn *sql.DB
	var err error
	if strings.HasPrefix(db, "postgres") {
		cfg, perr := pgx.ParseConfig(db)
		if perr != nil {
			t.Fatal(perr)
		}
		conn = stdlib.OpenDB(*cfg)
	} else if conn, err = sql.Open("sqlite", sqliteDSN(db, false, time.Second)); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// TestLookalikesStoredBeforeTheRule: a database that took lookalikes of
// dog before schema 9 keeps every one of them, with its id, name and
// description, after the upgrade; a new lookalike of any of them is
// refused, naming the first one stored; and a new name still gets an id
// above theirs. On both stores.
func TestLookalikesStoredBeforeTheRule(t *testing.T) {
	db := testDB(t)
	if !strings.HasPrefix(db, "postgres") {
		db = filepath.Join(t.TempDir(), "v7.db")
	}
	migrateTestDB(t, db, 7)
	old := []Category{
		{ID: 1, Name: "dog"},
		{ID: 2, Name: "dog\u200b"},
		{ID: 4, Name: "ｄｏｇ"},
		{ID: 5, Name: "\u202eCat"},
		{ID: 6, Name: "d\u00adog"},
		{ID: 9, Name: "Ｂｉｒｄ"},
	}
	desc := "kept"
	old[2].Description = &desc
	for _, c := range old {
		execTestDB(t, db, "INSERT INTO categories (id, name, fold, description) VALUES ($1, $2, $3, $4)", c.ID, c.Name, foldName(c.Name), c.Description)
	}
	if strings.HasPrefix(db, "postgres") { // as petstore copy leaves it
		execTestDB(t, db, "SELECT setval(pg_get_serial_sequence('categories', 'id'), 9)")
	}
	key := createKey(t, db, "--plan", "business")
	ts := startServerOn(t, db, key)

	list := decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, ""))
	asJSON := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if got, want := asJSON(list), asJSON(old); got != want {
		t.Fatalf("after the upgrade the list is %s, want %s as stored", got, want)
	}
	create := func(name string) response {
		t.Helper()
		return ts.do(t, "POST", "/v1/categories", key, `{"name":`+jsonName(name)+`}`)
	}
	for _, tt := range []struct{ name, holder string }{
		{"DOG", "dog"},
		{"ｄog", "dog"},
		{"cat", "\u202eCat"},
		{"bird", "Ｂｉｒｄ"},
	} {
		if m := errorMessage(t, create(tt.name), http.StatusConflict, "conflict"); !strings.Contains(m, strconv.Quote(tt.holder)) {
			t.Errorf("%+q: message %q does not name %+q", tt.name, m, tt.holder)
		}
	}
	errorMessage(t, create("dog\u2060"), http.StatusBadRequest, "validation_failed")
	// Above every old id (PostgreSQL's refused inserts draw ids too).
	if r := create("fish"); r.status != 201 || decode[Category](t, r).ID <= 9 {
		t.Errorf("fish: %d %s, want 201 with an id above 9", r.status, r.body)
	}
	list = decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, ""))
	if len(list) != len(old)+1 || asJSON(list[:len(old)]) != asJSON(old) {
		t.Errorf("list %s, want the old rows as they were and fish", asJSON(list))
	}
}

// TestRollingUpgradeOldInstanceWrites: while a petstore of schema 7 or 8
// still runs beside this one on PostgreSQL, it inserts categories as it
// always did, without the comparison column; this one still refuses a new
// name that matches any of them, naming it, and goes on making new names.
func TestRollingUpgradeOldInstanceWrites(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	key := createKey(t, db, "--plan", "business")
	ts := startServerOn(t, db, key)
	if r := ts.do(t, "POST", "/v1/categories", key, `{"name":"first"}`); r.status != 201 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	// The statement of the old binaries (schema 7).
	oldInsert := `WITH made AS (INSERT INTO categories (name, fold, description)
		SELECT $1::text, $2::text, $3::text WHERE true ON CONFLICT (fold) DO NOTHING RETURNING id) SELECT (SELECT id FROM made)`
	for i, name := range []string{"Ｂｉｒｄ", "ｆｉｓｈ"} {
		execTestDB(t, db, oldInsert, name, foldName(name), nil)
		same := []string{"bird", "FISH"}[i]
		if m := errorMessage(t, ts.do(t, "POST", "/v1/categories", key, `{"name":"`+same+`"}`), http.StatusConflict, "conflict"); !strings.Contains(m, strconv.Quote(name)) {
			t.Errorf("%s: message %q does not name %+q, which an old instance stored", same, m, name)
		}
		if r := ts.do(t, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":"new %d"}`, i)); r.status != 201 {
			t.Errorf("new %d: %d %s", i, r.status, r.body)
		}
	}
}

// TestDefaultIgnorable pins the derived Default_Ignorable_Code_Point set,
// built from Go's tables, to code points listed in Unicode 15's
// DerivedCoreProperties.txt, and to neighbours that are not in it.
func TestDefaultIgnorable(t *testing.T) {
	in := []rune{0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180E, 0x180F,
		0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202E, 0x2060, 0x2064, 0x2065, 0x2066, 0x2069, 0x206F,
		0x3164, 0xFE00, 0xFE0F, 0xFEFF, 0xFFA0, 0xFFF0, 0xFFF8, 0x1BCA0, 0x1BCA3, 0x1D173, 0x1D17A,
		0xE0000, 0xE0001, 0xE0020, 0xE007F, 0xE0100, 0xE01EF, 0xE0FFF}
	out := []rune{'a', ' ', 0x00A0, 0x0600, 0x0605, 0x06DD, 0x070F, 0x08E2, 0x110BD, 0xFFF9, 0xFFFB, 0x13430,
		0x2028, 0x2029, 0x3000, 0x2022, 0xFE10, 0xFFFC, 0x1BCA4, 0x1D17B, 0xFF44, 0x2764, 0x1F436}
	for _, r := range in {
		if !defaultIgnorable(r) {
			t.Errorf("U+%04X is Default_Ignorable_Code_Point, but defaultIgnorable says no", r)
		}
	}
	for _, r := range out {
		if defaultIgnorable(r) {
			t.Errorf("U+%04X is not Default_Ignorable_Code_Point, but defaultIgnorable says so", r)
		}
	}
}

func TestRefusedInName(t *testing.T) {
	for _, tt := range []struct {
		name string
		want rune
		bidi bool
	}{
		{"dog\u200b", 0x200B, false}, {"\u200bdog", 0x200B, false}, {"d\u00adog", 0x00AD, false},
		{"dog\ufeff", 0xFEFF, false}, {"\u202edog", 0x202E, true}, {"dog\u2060", 0x2060, false},
		{"\u061cdog", 0x061C, true}, {"dog\u200e", 0x200E, true}, {"\u2067dog", 0x2067, true},
		{"dog\u3164", 0x3164, false}, {"🏴\U000E0067\U000E0062\U000E007F", 0xE0067, false},
	} {
		r, why, ok := refusedInName(tt.name)
		if !ok || r != tt.want || strings.Contains(why, "bidirectional") != tt.bidi {
			t.Errorf("refusedInName(%+q) = U+%04X, %q, %v; want U+%04X (bidi %v)", tt.name, r, why, ok, tt.want, tt.bidi)
		}
	}
	for _, name := range []string{"dog", "❤️ pets", "👨\u200d👩\u200d👧", "Straße", "ｄｏｇ", "e\u0301cole", "漢字\U000E0100", "ᠠ\u180b"} {
		if r, why, ok := refusedInName(name); ok {
			t.Errorf("refusedInName(%+q) = U+%04X %s; want it allowed", name, r, why)
		}
	}
}

func TestCompareName(t *testing.T) {
	same := [][2]string{
		{"dog", "DOG"}, {"dog", "ｄｏｇ"}, {"dog", "ＤＯＧ"}, {"Straße", "STRASSE"}, {"ÉCOLE", "e\u0301cole"},
		{"fish", "ﬁsh"}, {"❤️ pets", "❤ pets"}, {"👨\u200d👩\u200d👧", "👨👩👧"}, {"dog", "dog\u200b"},
		{"dog", "d\u00adog"}, {"dog", "\u202edog"}, {"Σίσυφος", "ΣΊΣΥΦΟΣ"}, {"K", "\u212a"}, {"x²", "x2"},
		// Cherokee, which x/text's Fold swaps case for case: folded to the
		// capitals, as CaseFolding.txt does.
		{"\u13a0\u13f5", "\uab70\u13fd"}, {"\u13f0", "\u13f8"},
	}
	for _, p := range same {
		if a, b := compareName(p[0]), compareName(p[1]); a != b {
			t.Errorf("compareName(%+q) = %+q, compareName(%+q) = %+q; want equal", p[0], a, p[1], b)
		}
	}
	for r := rune(0x13a0); r <= 0xabbf; r++ {
		if s := string(r); compareName(compareName(s)) != compareName(s) {
			t.Errorf("compareName is not idempotent on %+q: %+q, then %+q", s, compareName(s), compareName(compareName(s)))
		}
	}
	for _, p := range [][2]string{{"Dog", "Dogs"}, {"cote", "côte"}, {"🐶", "🐱"}} {
		if compareName(p[0]) == compareName(p[1]) {
			t.Errorf("compareName(%+q) == compareName(%+q); want distinct", p[0], p[1])
		}
	}
}

// TestNamePatternMatchesValidName holds the document's name pattern and
// validName to one answer: for every code point, alone, inside a name and
// at its edges, and for names at the length bound with and without the
// white space that is trimmed. Outside nameRuleTables no code point is
// refused or white space, so the pattern's classes may list those tables'
// code points only.
func TestNamePatternMatchesValidName(t *testing.T) {
	re := regexp.MustCompile(namePattern())
	check := func(name string) {
		t.Helper()
		_, err := validName("name", &name)
		if got, want := re.MatchString(name), err == nil; got != want {
			t.Fatalf("%+q: the pattern says %v, validName %v (%v)", name, got, want, err)
		}
	}
	inTables := func(r rune) bool {
		for _, tab := range nameRuleTables {
			if unicode.Is(tab, r) {
				return true
			}
		}
		return false
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue
		}
		if !inTables(r) {
			if unicode.IsControl(r) || unicode.IsSpace(r) || refusedRune(r) != "" {
				t.Fatalf("U+%04X is singled out by a name rule but is in none of nameRuleTables", r)
			}
			if r%97 != 0 { // a sample of the code points that every rule lets by
				continue
			}
		}
		s := string(r)
		check(s)
		check("a" + s + "b")
		check(" " + s + "b\t")
		check("a" + s + "\u3000")
	}
	x := func(n int) string { return strings.Repeat("x", n) }
	for _, name := range []string{
		"", " ", "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000",
		x(1), x(99), x(100), x(101), " " + x(100) + " ", "\u3000" + x(100) + "\u2029", " " + x(101) + " ",
		"x" + strings.Repeat(" ", 98) + "x", "x" + strings.Repeat(" ", 99) + "x",
		strings.Repeat("\U0001F600", 100), strings.Repeat("\U0001F600", 101),
		"a\u200db", "\u200d", "\u2764\ufe0f", "\ufe0f", "a\U000e0100", "a\u200bb", "\u00a0a\u00a0", "a\u0085b",
	} {
		check(name)
	}
}

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
		{"emoji with a variation selector", str("❤️ pets"), "❤️ pets", ""},
		{"emoji joined", str("👨\u200d👩\u200d👧"), "👨\u200d👩\u200d👧", ""},
		{"zero width space", str("dog\u200b"), "", "must not contain U+200B, an invisible"},
		{"soft hyphen", str("d\u00adog"), "", "U+00AD"},
		{"right-to-left override", str("\u202edog"), "", "must not contain U+202E, a bidirectional control"},
		{"byte order mark", str("dog\ufeff"), "", "U+FEFF"},
		{"word joiner", str("dog\u2060"), "", "U+2060"},
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

// TestAllInvisibleNameIs400: a name of joiners, variation selectors and
// white space alone shows as nothing, and one starting with a joiner or a
// selector has nothing for it to act on: 400, by validName and by the
// document's pattern alike; an emoji with its selector and joiner is fine.
func TestAllInvisibleNameIs400(t *testing.T) {
	re := regexp.MustCompile(namePattern())
	for _, name := range []string{"\u200d", "\ufe0f", " \u200d \ufe0f ", "\u200d\u200d", "\ufe0fDog", "\u200dDog", "\U000e0100", "\u180b"} {
		n := name
		if _, err := validName("name", &n); err == nil || err.Code != "validation_failed" {
			t.Errorf("validName(%+q) = %v, want validation_failed", name, err)
		}
		if re.MatchString(name) {
			t.Errorf("the pattern takes %+q", name)
		}
	}
	for _, name := range []string{"\u2764\ufe0f", "\U0001f468\u200d\U0001f469", "Dog\u200d", " x\ufe0f "} {
		n := name
		if _, err := validName("name", &n); err != nil || !re.MatchString(name) {
			t.Errorf("%+q: validName %v, pattern %v; want both to take it", name, err, re.MatchString(name))
		}
	}
	ts := startServer(t)
	wantError(t, ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"\u200d\ufe0f"}`), 400, "validation_failed")
	wantError(t, ts.do(t, "POST", "/v1/pets", ts.key, `{"name":" \ufe0f ","categoryId":1}`), 400, "validation_failed")
}
