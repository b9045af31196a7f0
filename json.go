// json.go owns the wire format: decoding a request body strictly (type,
// size, shape, unknown fields) and encoding responses, whole or streamed.

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxBodyBytes bounds every request body.
const maxBodyBytes = 64 << 10

// jsonContentType is the shared Content-Type header value of JSON bodies.
var jsonContentType = []string{"application/json"}

// writeJSON writes v as the JSON body of a response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer putBodyBuffer(buf) // Write has copied the bytes by the time it returns
	buf.Reset()
	var body []byte
	if err := encodeJSON(buf, v); err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"status":500,"code":"internal_error","message":"internal error"}` + "\n")
	} else {
		body = buf.Bytes()
	}
	writeRaw(w, status, body)
}

// autoLengthMax is the largest body net/http gives a Content-Length of its
// own: a handler that returns having written no more than its 2 KiB
// buffer, and never flushed, gets one computed from the buffered bytes
// ("under a few KB", says ResponseWriter.Write), except an empty answer to
// HEAD. Past it, a body without a Content-Length would go out chunked.
const autoLengthMax = 2048

// writeRaw answers with body, JSON encoded before (a stored answer's, for
// a replay byte for byte). Nearly every such body (errors, 429s, a created
// row) is under autoLengthMax, and leaving its Content-Length to net/http
// keeps the header map one entry smaller (TestWriteRawContentLength): a
// map past its first group of eight entries becomes a table, at a cost of
// allocations on every refusal (BENCHMARKS.md has the figures).
func writeRaw(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	if len(body) == 0 || len(body) > autoLengthMax {
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	w.WriteHeader(status)
	w.Write(body)
}

// encodeJSON appends v to buf as a response body: one line, "<", ">" and
// "&" left as they are.
func encodeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeJSONArray streams the values that iterate hands to its callback as
// one JSON array with status 200, so that a long list never sits in memory
// whole; no values is "[]".
func writeJSONArray[T any](w http.ResponseWriter, r *http.Request, iterate func(func(T) error) error) {
	var bw *bufio.Writer
	err := iterate(func(v T) error {
		item, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if bw == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			bw = bufio.NewWriterSize(w, 32<<10)
			bw.WriteByte('[')
		} else {
			bw.WriteByte(',')
		}
		_, err = bw.Write(item)
		return err
	})
	switch {
	case err != nil && bw == nil:
		writeError(w, r, err)
	case err != nil:
		// The status is sent: cut the array short so the client sees
		// invalid JSON rather than a complete-looking list.
		noteError(r, err)
		bw.Flush()
		panic(http.ErrAbortHandler)
	case bw == nil:
		writeJSON(w, http.StatusOK, []struct{}{})
	default:
		bw.WriteString("]\n")
		bw.Flush()
	}
}

// decodeJSON reads a JSON object of at most maxBodyBytes into dst. It
// refuses a wrong Content-Type (415), a larger body (413), invalid UTF-8,
// malformed JSON, trailing data or a non-object (400 invalid_json), and
// unknown fields or wrong types (400 validation_failed).
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	body, done, err := readBody(w, r)
	if err != nil {
		return err
	}
	defer done() // the decoded values are copies; nothing keeps the bytes
	return decodeBody(body, dst)
}

// readBody reads r's body, which must be JSON (415) of at most maxBodyBytes
// (413), into a pooled buffer; done gives the buffer back.
func readBody(w http.ResponseWriter, r *http.Request) (body []byte, done func(), err error) {
	if !isJSONContentType(r.Header.Get("Content-Type")) {
		return nil, nil, errorf("unsupported_media_type", "the request body must be application/json")
	}
	if r.ContentLength > maxBodyBytes { // refuse before waiting for it
		return nil, nil, errorf("payload_too_large", "the request body is larger than %d bytes", maxBodyBytes)
	}
	buf := bodyBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	_, err = buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		err = errorf("payload_too_large", "the request body is larger than %d bytes", maxBodyBytes)
	case err != nil:
		err = errorf("invalid_json", "the request body could not be read")
	}
	if err != nil {
		putBodyBuffer(buf)
		return nil, nil, err
	}
	return buf.Bytes(), func() { putBodyBuffer(buf) }, nil
}

// decodeBody decodes body, a JSON object, into dst, as decodeJSON says.
func decodeBody(body []byte, dst any) error {
	body = bytes.TrimLeft(body, " \t\r\n")
	switch {
	case len(body) == 0:
		return errorf("invalid_json", "the request body is empty; send a JSON object")
	case body[0] != '{':
		return errorf("invalid_json", "the request body must be a JSON object")
	case !utf8.Valid(body):
		return errorf("invalid_json", "the request body is not valid UTF-8")
	}
	keys, shapeErr := checkJSONShape(body)
	if shapeErr != nil {
		return shapeErr
	}
	if loneSurrogate(body) {
		return errorf("invalid_json", "the request body holds a lone surrogate escape (such as \\ud800), which names no character")
	}
	// Unmarshal checks the whole body before it decodes any of it.
	err := json.Unmarshal(body, dst)
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		// The decoder says whether the error is in the object or after it.
		// It reads the object as raw JSON, not into dst: a body that does
		// not parse is invalid_json, whatever its object's fields.
		var first json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&first); err != nil {
			return jsonError(err)
		}
		return errorf("invalid_json", "the request body has data after the JSON object")
	}
	// One object and nothing after it: only its keys and types can be wrong.
	// encoding/json matches field names ignoring case; the API does not.
	known := jsonFieldNames(dst)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return errorf("validation_failed", "unknown field \"%s\"", clipField(k))
		}
	}
	if err != nil {
		return jsonError(err)
	}
	if ae := nullField(dst, keys); ae != nil {
		return ae
	}
	return nil
}

// nullField refuses a null given for any of keys, the fields present in
// the body: no field of a request body may be null (DECISIONS.md section
// 18). A body's fields are pointers (TestBodyFieldsArePointers), which a
// null leaves nil and any other value sets, so a present key whose field
// is nil was null.
func nullField(dst any, keys []string) *apiError {
	v := reflect.ValueOf(dst).Elem()
	for _, f := range jsonFields(dst) {
		if fv := v.Field(f.index); fv.Kind() == reflect.Pointer && fv.IsNil() && slices.Contains(keys, f.name) {
			return errorf("validation_failed", "%s must be %s, not null", f.name, jsonTypeName(fv.Type().Elem().Kind().String()))
		}
	}
	return nil
}

// bodyBuffers holds the buffers that request bodies are read into.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putBodyBuffer returns buf to the pool, unless a large body made it large.
func putBodyBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 8<<10 {
		bodyBuffers.Put(buf)
	}
}

// maxJSONDepth bounds the nesting of a request body: the API's objects are
// flat, so anything deeper is a mistake or an attack.
const maxJSONDepth = 32

// checkJSONShape refuses what encoding/json would let through silently: a
// key given twice in one object (it keeps the last) and nesting deeper than
// maxJSONDepth. It returns the keys of the outermost object. Syntax errors
// are left to the decoder, which names them: on malformed input the result
// is only good enough to refuse it, never a panic or a long loop.
//
// It is one pass over the bytes: a key is a string that follows "{" or ","
// inside an object. (It replaced a walk with json.Decoder.Token, which
// cost a noticeable part of every POST, BENCHMARKS.md says how much;
// FuzzJSONShape holds the two to the same answers on valid JSON.)
func checkJSONShape(body []byte) (topKeys []string, _ *apiError) {
	var stack []jsonFrame
	wantKey := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case '{', '[':
			if len(stack) == maxJSONDepth {
				return nil, errorf("invalid_json", "the JSON is nested deeper than %d levels", maxJSONDepth)
			}
			stack = append(stack, jsonFrame{isObj: c == '{'})
			wantKey = c == '{'
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			wantKey = false
		case ',':
			wantKey = len(stack) > 0 && stack[len(stack)-1].isObj
		case '"':
			end := stringEnd(body, i)
			if wantKey && len(stack) > 0 {
				key := jsonKey(body[i:end])
				top := &stack[len(stack)-1]
				if top.seen(key) {
					return nil, errorf("invalid_json", "the key \"%s\" appears twice in one object", clipField(key))
				}
				if len(stack) == 1 {
					topKeys = append(topKeys, key)
				}
			}
			wantKey = false
			i = end - 1
		}
	}
	return topKeys, nil
}

// jsonFrame is an array or object that checkJSONShape is inside of.
type jsonFrame struct {
	isObj bool
	keys  []string            // an object's keys, while few
	set   map[string]struct{} // then all of them
}

// seen reports whether the object had key already, and records it. A
// slice serves the usual few keys; a map keeps a body of thousands of keys
// from costing a quadratic search.
func (f *jsonFrame) seen(key string) bool {
	if f.set == nil {
		if slices.Contains(f.keys, key) {
			return true
		}
		f.keys = append(f.keys, key)
		if len(f.keys) > 16 {
			f.set = make(map[string]struct{}, 2*len(f.keys))
			for _, k := range f.keys {
				f.set[k] = struct{}{}
			}
		}
		return false
	}
	if _, ok := f.set[key]; ok {
		return true
	}
	f.set[key] = struct{}{}
	return false
}

// stringEnd returns the index just past the JSON string that starts at
// body[start] (a quote), or len(body) if it does not end.
func stringEnd(body []byte, start int) int {
	for i := start + 1; i < len(body); i++ {
		switch body[i] {
		case '\\':
			i++ // the escaped byte cannot end the string
		case '"':
			return i + 1
		}
	}
	return len(body)
}

// jsonKey returns the text of a quoted JSON key, escapes resolved.
func jsonKey(quoted []byte) string {
	if bytes.IndexByte(quoted, '\\') < 0 && len(quoted) >= 2 && quoted[len(quoted)-1] == '"' {
		return string(quoted[1 : len(quoted)-1])
	}
	var key string
	if json.Unmarshal(quoted, &key) != nil {
		return string(quoted) // malformed: the decoder will say so
	}
	return key
}

var jsonFieldCache sync.Map // reflect.Type -> jsonStruct

// jsonStruct is what decodeBody needs of a body's struct type: its JSON
// field names, and where each field is.
type jsonStruct struct {
	names  []string
	fields []jsonField
}

type jsonField struct {
	name  string
	index int
}

// jsonFieldNames returns the JSON names of the fields of the struct that
// dst points to.
func jsonFieldNames(dst any) []string { return jsonStructOf(dst).names }

// jsonFields returns the fields of the struct that dst points to that
// have JSON names.
func jsonFields(dst any) []jsonField { return jsonStructOf(dst).fields }

func jsonStructOf(dst any) jsonStruct {
	t := reflect.TypeOf(dst).Elem()
	if s, ok := jsonFieldCache.Load(t); ok {
		return s.(jsonStruct)
	}
	var s jsonStruct
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			s.names = append(s.names, name)
			s.fields = append(s.fields, jsonField{name, i})
		}
	}
	jsonFieldCache.Store(t, s)
	return s
}

// jsonError turns an error of encoding/json into a client's error.
func jsonError(err error) *apiError {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return errorf("invalid_json", "the request body must be a JSON object")
		}
		if k := typeErr.Type.Kind(); k >= reflect.Int && k <= reflect.Uint64 {
			return errorf("validation_failed", "%s", intTypeMessage(field, typeErr.Value))
		}
		return errorf("validation_failed", "%s must be %s", field, jsonTypeName(typeErr.Type.Kind().String()))
	case errors.As(err, &syntaxErr):
		return errorf("invalid_json", "malformed JSON at byte %d: %s", syntaxErr.Offset, syntaxErr.Error())
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errorf("invalid_json", "the JSON object is truncated")
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return errorf("validation_failed", "unknown field %s", field)
	}
	return errorf("invalid_json", "the request body is not valid JSON")
}

// jsonTypeName names the JSON type that a Go kind decodes from.
func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int64", "int", "int32", "uint", "uint64":
		return "an integer"
	case "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	}
	return kind
}

// isJSONContentType reports whether a Content-Type value is application/json,
// parameters allowed.
func isJSONContentType(v string) bool {
	mt, _, err := mime.ParseMediaType(v)
	return err == nil && mt == "application/json"
}
