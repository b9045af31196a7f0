// json_surrogate.go owns one rule of request bodies that encoding/json
// does not keep: a string's \u escapes must name characters, so a lone
// UTF-16 surrogate ("\ud800", or "\udc00" without a high one before it)
// is refused instead of being stored as U+FFFD (DECISIONS.md section 21).

package main

import "bytes"

// loneSurrogate reports whether a JSON text holds, inside a string, a \u
// escape of a surrogate that is not one half of a pair (a high surrogate
// D800-DBFF followed at once by an escaped low one DC00-DFFF). It reads
// only escapes: "\\ud800" is a backslash and the letters ud800. On
// malformed input the answer only needs to be safe (the decoder refuses
// the body anyway).
func loneSurrogate(body []byte) bool {
	if !bytes.Contains(body, []byte(`\u`)) {
		return false
	}
	inString := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(body):
			if body[i+1] != 'u' {
				i++ // the escaped byte: a quote or a backslash ends nothing
				continue
			}
			u, ok := hex4(body, i+2)
			if !ok {
				return false // malformed: the decoder says so
			}
			switch {
			case u >= 0xDC00 && u <= 0xDFFF:
				return true
			case u >= 0xD800 && u <= 0xDBFF:
				if i+11 >= len(body) || body[i+6] != '\\' || body[i+7] != 'u' {
					return true
				}
				lo, ok := hex4(body, i+8)
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 11 // the pair
			default:
				i += 5
			}
		}
	}
	return false
}

// hex4 reads the four hex digits at body[at:], as a \u escape's.
func hex4(body []byte, at int) (rune, bool) {
	if at+4 > len(body) {
		return 0, false
	}
	var r rune
	for _, c := range body[at : at+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
