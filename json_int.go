// json_int.go owns the integer fields of request bodies: any JSON number
// whose exact decimal value is an integer that fits an int64 (1, 1.0, 1e2,
// 100e-2), as JSON Schema counts integers (DECISIONS.md section 18).
// Path and query integers are not these: they stay decimal digits
// (params.go).

package main

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
)

// jsonInt is an integer field of a request body. Its value is worked out
// from the literal's digits, never through a float64, which would make
// 1.00000000000000000001 an integer and 9007199254740993 another one.
type jsonInt int64

// UnmarshalJSON takes a JSON number that is an integer within int64. Any
// other value is an *json.UnmarshalTypeError, to which encoding/json adds
// the field's name. (A null never gets here: it leaves a *jsonInt nil,
// and decodeBody refuses it.)
func (n *jsonInt) UnmarshalJSON(lit []byte) error {
	v, err := parseJSONInt(lit)
	if err != nil {
		return &json.UnmarshalTypeError{Value: jsonValueKind(lit), Type: reflect.TypeFor[int64]()}
	}
	*n = jsonInt(v)
	return nil
}

var (
	errNotNumber  = errors.New("not a JSON number")
	errNotInteger = errors.New("not an integer")
	errIntRange   = errors.New("an integer out of int64's range")
)

// parseJSONInt returns the value of a JSON number literal that is an
// integer within int64: errNotInteger when its value has a fraction,
// errIntRange when it is an integer too large, errNotNumber when lit is
// not a number. It never allocates, and its work is linear in the
// literal's length whatever its exponent (1e999999999 is out of range at
// once).
//
// The value is digits × 10^exp, digits being the integer and fraction
// parts' digits together and exp the exponent less the fraction's length.
// Without its leading and trailing zeros (each trailing one moves exp up),
// a value is an integer exactly when exp >= 0, and then fits an int64 only
// if its digits and exp together are at most 19 digits long.
func parseJSONInt(lit []byte) (int64, error) {
	s := lit
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart, frac := s[:i], s[i:i]
	if i == 0 {
		return 0, errNotNumber
	}
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == i+1 {
			return 0, errNotNumber
		}
		frac, i = s[i+1:j], j
	}
	exp := 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		expNeg := i < len(s) && s[i] == '-'
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		start := i
		for ; i < len(s) && isDigit(s[i]); i++ {
			if exp < 1e9 { // beyond, every literal of a body decides alike
				exp = exp*10 + int(s[i]-'0')
			}
		}
		if i == start {
			return 0, errNotNumber
		}
		if expNeg {
			exp = -exp
		}
	}
	if i != len(s) {
		return 0, errNotNumber
	}
	n := len(intPart) + len(frac)
	digit := func(k int) byte {
		if k < len(intPart) {
			return intPart[k]
		}
		return frac[k-len(intPart)]
	}
	lo, hi := 0, n
	for lo < hi && digit(lo) == '0' {
		lo++
	}
	for hi > lo && digit(hi-1) == '0' {
		hi--
	}
	if lo == hi {
		return 0, nil // zero, however written: 0.0e7, -0
	}
	exp += n - hi - len(frac)
	switch {
	case exp < 0:
		return 0, errNotInteger
	case hi-lo+exp > 19: // at least 10^19, above 2^63
		return 0, errIntRange
	}
	var u uint64 // below 10^19 < 2^64
	for k := lo; k < hi; k++ {
		u = u*10 + uint64(digit(k)-'0')
	}
	for range exp {
		u *= 10
	}
	switch {
	case !neg && u <= math.MaxInt64:
		return int64(u), nil
	case neg && u <= 1<<63:
		return int64(-u), nil // wraps to MinInt64 at 2^63, as it should
	}
	return 0, errIntRange
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// jsonValueKind names the kind of JSON value that lit is, as
// json.UnmarshalTypeError.Value does: "number 1.5", "string", "bool".
func jsonValueKind(lit []byte) string {
	switch c := lit[0]; {
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "bool"
	case c == '[':
		return "array"
	case c == '{':
		return "object"
	case c == 'n':
		return "null"
	}
	return "number " + string(lit)
}

// intTypeMessage is what an integer field's type error says: that the
// number is not an integer, or not within int64, or that the value is
// not a number at all.
func intTypeMessage(field, value string) string {
	if lit, ok := strings.CutPrefix(value, "number "); ok {
		if _, err := parseJSONInt([]byte(lit)); errors.Is(err, errIntRange) {
			return field + " must be an integer from -9223372036854775808 to 9223372036854775807"
		}
	}
	return field + " must be an integer"
}
