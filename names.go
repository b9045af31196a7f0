// names.go owns the rules of category and pet names: what a name may be
// (validName), which code points it may not hold (bidi controls and
// invisible, default-ignorable ones), and the keys under which category
// names are unique (foldName, compareName).

package main

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// maxNameLen bounds a name, in code points.
const maxNameLen = 100

// validName trims name and checks it against the name rules: 1 to 100
// code points, no control characters, no bidi controls or invisible
// (default-ignorable) code points but the joiner and variation selectors
// (refusedInName). field names the field in errors.
func validName(field string, name *string) (string, *apiError) {
	if name == nil {
		return "", errorf("validation_failed", "%s is required", field)
	}
	n := strings.TrimSpace(*name)
	switch l := utf8.RuneCountInString(n); {
	case l == 0:
		return "", errorf("validation_failed", "%s must not be empty", field)
	case l > maxNameLen:
		return "", errorf("validation_failed", "%s must be at most %d characters, got %d", field, maxNameLen, l)
	}
	if strings.IndexFunc(n, unicode.IsControl) >= 0 {
		return "", errorf("validation_failed", "%s must not contain control characters", field)
	}
	if r, why, ok := refusedInName(n); ok {
		return "", errorf("validation_failed", "%s must not contain U+%04X, %s", field, r, why)
	}
	if r, _ := utf8.DecodeRuneInString(n); joinsOrSelects(r) {
		return "", errorf("validation_failed", "%s must start with a visible character, not U+%04X: a joiner or a variation selector acts on the character before it, and a name of invisible characters alone shows as nothing", field, r)
	}
	return n, nil
}

// joinsOrSelects reports whether r is the zero-width joiner or a variation
// selector: invisible code points that a name may hold (emoji need them),
// but not first, where there is nothing before them to join or select. So
// a name whose every code point is invisible (these and white space; the
// other invisible ones are refused anywhere) is refused too (DECISIONS.md
// section 21).
func joinsOrSelects(r rune) bool {
	return r == zeroWidthJoiner || unicode.Is(unicode.Variation_Selector, r)
}

// defaultIgnorable reports whether r has Unicode's derived property
// Default_Ignorable_Code_Point: it is drawn as nothing unless a font knows
// better. Go's unicode package has the contributory properties but not the
// derived one, so it is derived here as DerivedCoreProperties.txt does:
//
//	Other_Default_Ignorable_Code_Point + Cf + Variation_Selector
//	- White_Space - FFF9..FFFB - 13430..13440 - Prepended_Concatenation_Mark
//
// (FFF9..FFFB are the interlinear annotation characters, 13430..13440 the
// Egyptian hieroglyph format controls: both are meant to show.)
func defaultIgnorable(r rune) bool {
	in := unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) ||
		unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r)
	out := unicode.Is(unicode.White_Space, r) ||
		(r >= 0xFFF9 && r <= 0xFFFB) || (r >= 0x13430 && r <= 0x13440) ||
		unicode.Is(unicode.Prepended_Concatenation_Mark, r)
	return in && !out
}

// zeroWidthJoiner joins emoji into one (a family: man ZWJ woman ZWJ girl).
const zeroWidthJoiner = '\u200d'

// refusedInName returns the first code point that a name may not hold, and
// why: a bidirectional control, which can make a name show as another, or
// a default-ignorable code point, which shows as nothing. The zero-width
// joiner and the variation selectors (U+FE0F asks for the emoji form of
// U+2764 in "❤️") are ignorable too but allowed: emoji need them, and the
// comparison key drops them, so they cannot make a lookalike of a name.
// ok is false when the name holds none.
func refusedInName(name string) (r rune, why string, ok bool) {
	for _, r := range name {
		if why := refusedRune(r); why != "" {
			return r, why, true
		}
	}
	return 0, "", false
}

// refusedRune says why a name may not hold r, or "" when it may: the rule
// of refusedInName for one code point (control characters are
// validName's, apart).
func refusedRune(r rune) string {
	switch {
	case r < utf8.RuneSelf:
	case unicode.Is(unicode.Bidi_Control, r):
		return "a bidirectional control"
	case r == zeroWidthJoiner || unicode.Is(unicode.Variation_Selector, r):
	case defaultIgnorable(r):
		return "an invisible (default-ignorable) code point"
	}
	return ""
}

// namePattern is the OpenAPI document's pattern of a name as sent
// (TestDocumentPatterns holds the document to it): the white space that
// validName trims (unicode.IsSpace, listed: \s is not the same set in Go
// and ECMA-262), then 1 to maxNameLen code points that are neither
// control characters nor refusedRune's, the first and last not white
// space and the first not joinsOrSelects, then white space again. It is written for ECMA-262's u mode
// (JSON Schema 2020-12) in a form Go's regexp reads too: no look-around,
// code points up to U+00FF as \xHH (\u is ECMA-262's only), the others as
// themselves.
func namePattern() string {
	refused := func(r rune) bool { return unicode.IsControl(r) || refusedRune(r) != "" }
	space := runeClass(false, unicode.IsSpace)
	inner := runeClass(true, refused)
	edge := runeClass(true, func(r rune) bool { return refused(r) || unicode.IsSpace(r) })
	first := runeClass(true, func(r rune) bool { return refused(r) || unicode.IsSpace(r) || joinsOrSelects(r) })
	return fmt.Sprintf("^%s*%s(?:%s{0,%d}%s)?%s*$", space, first, inner, maxNameLen-2, edge, space)
}

// nameRuleTables hold every code point that a name rule can single out:
// control characters, white space, bidi controls and the default-ignorable
// ones (defaultIgnorable's sets). Outside them, refusedRune and
// unicode.IsSpace are false (TestNameRuleTables checks every code point).
var nameRuleTables = []*unicode.RangeTable{
	unicode.Cc, unicode.White_Space, unicode.Bidi_Control,
	unicode.Other_Default_Ignorable_Code_Point, unicode.Cf, unicode.Variation_Selector,
}

// runeClass writes a character class, as ranges, of the code points of
// nameRuleTables for which in is true (negated: of all the others).
func runeClass(negated bool, in func(rune) bool) string {
	var rs []rune
	for _, t := range nameRuleTables {
		for _, r16 := range t.R16 {
			for r := rune(r16.Lo); r <= rune(r16.Hi); r += rune(r16.Stride) {
				rs = append(rs, r)
			}
		}
		for _, r32 := range t.R32 {
			for r := rune(r32.Lo); r <= rune(r32.Hi); r += rune(r32.Stride) {
				rs = append(rs, r)
			}
		}
	}
	rs = slices.Compact(slices.Sorted(slices.Values(rs)))
	rs = slices.DeleteFunc(rs, func(r rune) bool { return !in(r) })
	var b strings.Builder
	b.WriteByte('[')
	if negated {
		b.WriteByte('^')
	}
	write := func(r rune) {
		if r <= 0xff {
			fmt.Fprintf(&b, "\\x%02x", r)
		} else {
			b.WriteRune(r)
		}
	}
	for i := 0; i < len(rs); i++ {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		write(rs[i])
		if j > i+1 {
			b.WriteByte('-')
		}
		if j > i {
			write(rs[j])
		}
		i = j
	}
	b.WriteByte(']')
	return b.String()
}

// foldName is the key under which category names are unique: Unicode full
// case folding, then NFC, so "Dog" and "dog", "ÉCOLE" and "école", and
// "Straße" and "STRASSE" collide.
//
// For an ASCII name, the usual case, that is ASCII lower case: no other
// rune folds to or from ASCII here (U+212A KELVIN SIGN folds to "k", but
// it is not ASCII), and NFC leaves ASCII alone. FuzzFoldName checks this
// shortcut against the full path.
func foldName(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return foldUnicode(name)
		}
	}
	return strings.ToLower(name)
}

func foldUnicode(name string) string {
	return norm.NFC.String(cases.Fold().String(norm.NFC.String(name)))
}

// compareName is the key under which category names are unique (the
// name_cmp column): the NFKC form, case-folded as foldName does (so
// "Straße" and "STRASSE" still collide), with every default-ignorable code
// point removed. So full-width "ｄｏｇ", the ligature "ﬁ" and "dog" with a
// variation selector or a joiner compare as their plain forms do. It is
// not a PRECIS profile: Nickname folds ß apart from ss and refuses emoji
// sequences.
//
// For an ASCII name, the usual case, it is ASCII lower case, as foldName
// is; FuzzFoldName checks this shortcut against the full path.
func compareName(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return compareUnicode(name)
		}
	}
	return strings.ToLower(name)
}

func compareUnicode(name string) string {
	// Ignorables go first: one between two combining marks (U+034F, the
	// grapheme joiner) would keep NFKC from ordering them, and removing
	// it after would leave a string that is not normalized.
	s := strings.Map(dropIgnorable, name)
	s = norm.NFKC.String(strings.Map(cherokeeUpper, cases.Fold().String(norm.NFKC.String(s))))
	// NFKC can make an ignorable of one (U+FFA0 HALFWIDTH HANGUL FILLER
	// is U+3164 HANGUL FILLER); none seen by the fuzzer survives, but the
	// key must not hold one.
	return strings.Map(dropIgnorable, s)
}

// cherokeeUpper maps a small Cherokee letter to its capital, as Unicode's
// CaseFolding.txt folds them (Cherokee was cased capital-first). x/text's
// cases.Fold swaps the two cases instead (U+13A0 to U+AB70 and U+AB70 to
// U+13A0), so without this a Cherokee name and its other case would
// compare apart, and compareName would not be idempotent.
func cherokeeUpper(r rune) rune {
	if r >= 0xAB70 && r <= 0xABBF || r >= 0x13F8 && r <= 0x13FD {
		return unicode.ToUpper(r)
	}
	return r
}

func dropIgnorable(r rune) rune {
	if r >= utf8.RuneSelf && defaultIgnorable(r) {
		return -1
	}
	return r
}
