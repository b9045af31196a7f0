// contract_gen_test.go holds the served document and the server to one
// contract in both directions (DECISIONS.md section 18): requests made
// from the document's schemas (their examples, bounds and patterns, and
// random values), judged by a JSON Schema validator of the 2020-12
// dialect, must be taken when the schemas take them and refused (400) when
// they refuse them, and every answer must validate.

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"net/textproto"
	"net/url"
	"regexp/syntax"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/net/http/httpguts"
)

// genSeed fixes the generator's choices, so that a failure repeats.
const genSeed = 35

// genRequests is how many requests the test makes of each operation whose
// inputs the schemas may refuse; one without such inputs gets genFew.
const (
	genRequests = 120
	genFew      = 5
	genTime     = 30 * time.Second // the bound on the whole run
)

// TestContractGenerative makes requests for every operation of the
// document that a real server serves and checks the server's answers
// against the schemas' judgement: no 400 for a request they accept (but
// for what JSON Schema cannot state, which the document's descriptions
// say: a reference to a record that does not exist), a 400 for every one
// they refuse, and every answer valid by the document's schema of its
// status. (A name equal to a stored one is 409, not 400.) Integers in
// paths and query strings are written as decimal digits, as section 6
// wants them; HTTP trims a header value's surrounding white space, so a
// header is judged as sent.
func TestContractGenerative(t *testing.T) {
	db := testDB(t)
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "1000000", "--rpd", "10000000", "--name", "generative")
	ts := startServerOn(t, db, key)
	served := ts.do(t, "GET", "/v1/openapi.json", "", "")
	if served.status != 200 {
		t.Fatalf("GET /v1/openapi.json: %d", served.status)
	}
	g := newGenDoc(t, served.body)
	g.rng = rand.New(rand.NewPCG(genSeed, genSeed))
	start := time.Now()
	deadline := start.Add(genTime)

	// Referenced records first: each POST's example, its references
	// pointed at records made before it.
	for _, op := range g.ops {
		if op.method != "POST" || op.body == nil || len(op.body.examples) == 0 {
			continue
		}
		for i := range 3 {
			ex := op.body.examples[0]
			body := g.exampleBody(op.body, ex, i)
			r := ts.do(t, "POST", g.base+op.path, ts.key, body)
			if r.status != 201 {
				t.Fatalf("POST %s %s (the document's example, references made first): %d %s", op.path, body, r.status, r.body)
			}
			g.noteCreated(op, r)
		}
	}

	var problems []string
	seen := map[string]bool{}
	problem := func(format string, args ...any) {
		p := fmt.Sprintf(format, args...)
		if !seen[p] {
			seen[p] = true
			problems = append(problems, p)
		}
	}
	total := 0
	for _, op := range g.ops {
		n := genRequests
		if !op.refusable() { // nothing to vary that matters (GET /openapi.json is 165 KB)
			n = genFew
		}
		var valid, invalid int
		for range n {
			if time.Now().After(deadline) {
				t.Fatalf("more than %v: it ran for about a second when written", genTime)
			}
			req := g.request(op)
			total++
			r, err := ts.send(op.method, g.base+req.path, ts.key, req.body, req.header...)
			if err != nil {
				t.Fatalf("%s %s: %v", op.method, req.path, err)
			}
			where := fmt.Sprintf("%s %s %s %q", op.method, req.path, req.body, req.header)
			var e apiError
			json.Unmarshal(r.body, &e)
			switch {
			case r.status >= 500:
				problem("%s: %d %s", where, r.status, r.body)
			case req.valid && r.status == 400 && !g.missingReference(req, e):
				problem("the schemas accept, the server refused: %s: %s", where, r.body)
			case !req.valid && r.status != 400:
				problem("the schemas refuse (%s), the server answered %d: %s", req.why, r.status, where)
			}
			if req.valid {
				valid++
			} else {
				invalid++
			}
			if msg := op.checkResponse(r); msg != "" {
				problem("%s -> %d: %s", where, r.status, msg)
			}
			if r.status == 201 {
				g.noteCreated(op, r)
			}
		}
		if n == genRequests && (valid < 10 || invalid < 10) {
			t.Errorf("%s %s: %d valid and %d invalid requests made; the generator should make both", op.method, op.path, valid, invalid)
		}
		t.Logf("%s %s: %d valid, %d invalid", op.method, op.path, valid, invalid)
	}
	t.Logf("%d requests in %v, seed %d", total, time.Since(start).Round(time.Millisecond), genSeed)
	sort.Strings(problems)
	for i, p := range problems {
		if i == 60 {
			t.Errorf("... and %d more", len(problems)-i)
			break
		}
		t.Error(p)
	}
}

// genDoc is the served document, ready to generate requests from and to
// judge them with.
type genDoc struct {
	t     *testing.T
	raw   map[string]any // decoded with json.Number, as the judge reads it
	c     *jsonschema.Compiler
	base  string // the first server's path: /v1
	ops   []*genOp
	rng   *rand.Rand
	known map[string][]int64 // ids created, by kind ("category")
	sent  map[string]bool    // header lines sent: an Idempotency-Key is sent once
}

// genOp is one operation of the document.
type genOp struct {
	method, path string // path as in the document, under base
	params       []*genParam
	body         *genBody
	creates      string // the kind of record a 201 creates, from its schema's name
	responses    map[int]*jsonschema.Schema
	documented   map[int]bool
}

// genParam is a parameter and the values to try for it.
type genParam struct {
	name, in string
	required bool
	integer  bool
	sch      *jsonschema.Schema
	values   []string
}

// genBody is a request body's object schema and its properties.
type genBody struct {
	sch      *jsonschema.Schema
	examples []any
	props    []*genProp
}

// genProp is a property of a request body: the literals to try for it,
// sorted into those its schema takes and those it refuses.
type genProp struct {
	name            string
	required        bool
	refers          string // the kind it must name ("Must name an existing category")
	valid, invalid  []string
	integer, string bool
}

func newGenDoc(t *testing.T, doc []byte) *genDoc {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	g := &genDoc{t: t, c: jsonschema.NewCompiler(), known: map[string][]int64{}, sent: map[string]bool{}}
	if err := dec.Decode(&g.raw); err != nil {
		t.Fatal(err)
	}
	g.c.DefaultDraft(jsonschema.Draft2020)
	if err := g.c.AddResource("mem:///openapi.json", g.raw); err != nil {
		t.Fatal(err)
	}
	servers, _ := g.raw["servers"].([]any)
	if len(servers) == 0 {
		t.Fatal("the document has no servers")
	}
	u, err := url.Parse(obj(servers[0])["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	g.base = u.Path
	g.rng = rand.New(rand.NewPCG(genSeed, 0)) // for the pools
	paths := obj(g.raw["paths"])
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		for _, m := range []string{"post", "get", "head", "put", "delete"} {
			if o := obj(paths[p])[m]; o != nil {
				g.ops = append(g.ops, g.operation(strings.ToUpper(m), p, "/paths/"+pointerToken(p)+"/"+m, obj(o)))
			}
		}
		for m := range obj(paths[p]) {
			if !slices.Contains([]string{"post", "get", "head", "put", "delete", "parameters", "summary", "description"}, m) {
				t.Fatalf("%s %s: the generator knows no such method", m, p)
			}
		}
	}
	// POSTs first, in the order of their references: a record before
	// those that name it; DELETEs last.
	sort.SliceStable(g.ops, func(i, j int) bool { return g.ops[i].rank() < g.ops[j].rank() })
	return g
}

// refusable reports whether the schemas refuse some request of op: it
// has a body, or a parameter of which the generator makes values they
// refuse (If-None-Match takes any string).
func (op *genOp) refusable() bool {
	if op.body != nil {
		return true
	}
	for _, p := range op.params {
		for _, v := range p.values {
			if !judgeParam(p, v) {
				return true
			}
		}
	}
	return false
}

func (op *genOp) rank() int {
	if op.method == "DELETE" { // last: the records the others name go
		return 200
	}
	if op.method != "POST" || op.body == nil {
		return 100
	}
	n := 0
	for _, p := range op.body.props {
		if p.refers != "" {
			n++
		}
	}
	return n
}

func (g *genDoc) operation(method, path, ptr string, o map[string]any) *genOp {
	op := &genOp{method: method, path: path, responses: map[int]*jsonschema.Schema{}, documented: map[int]bool{}}
	params, _ := o["parameters"].([]any)
	for i, p := range params {
		pptr := fmt.Sprintf("%s/parameters/%d", ptr, i)
		if ref, ok := obj(p)["$ref"].(string); ok {
			pptr = strings.TrimPrefix(ref, "#")
		}
		p := g.resolve(p)
		schema := g.resolve(p["schema"])
		gp := &genParam{name: p["name"].(string), in: p["in"].(string), sch: g.compile(pptr + "/schema")}
		gp.required, _ = p["required"].(bool)
		gp.integer = schema["type"] == "integer"
		var examples []any
		if ex, ok := p["example"]; ok {
			examples = append(examples, ex)
		}
		if gp.integer {
			for _, lit := range g.integerLiterals(schema, examples, false) {
				gp.values = append(gp.values, lit)
			}
			gp.values = append(gp.values, "abc", "1.5", "-", "0x10", " 1")
			if gp.in != "path" { // an empty segment names no operation
				gp.values = append(gp.values, "")
			}
		} else {
			gp.values = g.stringValues(schema, examples)
		}
		op.params = append(op.params, gp)
	}
	if rb := obj(o["requestBody"]); rb != nil {
		mt := obj(obj(rb["content"])["application/json"])
		bptr := ptr + "/requestBody/content/application~1json/schema"
		schema, sptr := g.resolveAt(mt["schema"], bptr)
		b := &genBody{sch: g.compile(bptr)}
		if ex, ok := mt["example"]; ok {
			b.examples = append(b.examples, ex)
		}
		required, _ := schema["required"].([]any)
		props := obj(schema["properties"])
		for _, name := range slices.Sorted(maps.Keys(props)) {
			ps := g.resolve(props[name])
			desc, _ := obj(props[name])["description"].(string)
			gp := &genProp{name: name, required: slices.Contains(required, any(name))}
			if _, kind, ok := strings.Cut(desc, "Must name an existing "); ok {
				gp.refers, _, _ = strings.Cut(kind, ".")
			}
			sch := g.compile(sptr + "/properties/" + pointerToken(name))
			var examples []any
			if ex, ok := ps["example"]; ok {
				examples = append(examples, ex)
			}
			for _, ex := range b.examples {
				if v, ok := obj(ex)[name]; ok {
					examples = append(examples, v)
				}
			}
			var lits []string
			switch ps["type"] {
			case "integer":
				gp.integer = true
				lits = g.integerLiterals(ps, examples, true)
			case "string":
				gp.string = true
				for _, s := range g.stringValues(ps, examples) {
					lits = append(lits, jsonString(s))
				}
			default:
				g.t.Fatalf("%s %s: property %s of type %v: the generator knows no such type", method, path, name, ps["type"])
			}
			lits = append(lits, "null", "true", "[]", "{}", `"1"`, "1", "1.5")
			for _, lit := range lits {
				if judge(sch, []byte(lit)) {
					gp.valid = append(gp.valid, lit)
				} else {
					gp.invalid = append(gp.invalid, lit)
				}
			}
			b.props = append(b.props, gp)
		}
		op.body = b
	}
	for status, r := range obj(o["responses"]) {
		code, err := strconv.Atoi(status)
		if err != nil {
			g.t.Fatalf("%s %s: response %q", method, path, status)
		}
		op.documented[code] = true
		resp, rptr := g.resolveAt(r, ptr+"/responses/"+status) // a shared response is in components.responses
		mt := obj(obj(resp["content"])["application/json"])
		if mt == nil {
			continue
		}
		op.responses[code] = g.compile(rptr + "/content/application~1json/schema")
		if ref, ok := obj(mt["schema"])["$ref"].(string); ok && code == 201 {
			op.creates = strings.ToLower(strings.TrimPrefix(ref, "#/components/schemas/"))
		}
	}
	return op
}

// genRequest is one request made for an operation, and the schemas'
// judgement of it.
type genRequest struct {
	path   string // with its query
	body   string
	header []string
	valid  bool
	why    string // what the schemas refuse, when they do
	refs   map[string]*big.Rat
}

// request makes a request for op: parameters and body mostly valid,
// often with one thing wrong, and judges it.
func (g *genDoc) request(op *genOp) genRequest {
	req := genRequest{valid: true, refs: map[string]*big.Rat{}}
	path := op.path
	q := url.Values{}
	for _, p := range op.params {
		if !p.required && g.rng.IntN(2) == 0 {
			continue
		}
		v := p.values[g.rng.IntN(len(p.values))]
		if p.in == "path" && p.integer && g.rng.IntN(2) == 0 {
			if ids := g.known[strings.TrimSuffix(strings.TrimSuffix(p.name, "Id"), "id")]; len(ids) > 0 {
				v = strconv.FormatInt(ids[g.rng.IntN(len(ids))], 10)
			}
		}
		judged := v
		switch p.in {
		case "path":
			path = strings.Replace(path, "{"+p.name+"}", url.PathEscape(v), 1)
		case "query":
			q.Set(p.name, v)
		case "header":
			judged = textproto.TrimString(v) // what HTTP carries
			// The same characters bare and quoted are one Idempotency-Key.
			once := p.name + ": " + strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(strings.Trim(judged, `"`))
			if !httpguts.ValidHeaderFieldValue(v) || g.sent[once] {
				continue // a client cannot send it, or a key would be reused
			}
			g.sent[once] = true
			req.header = append(req.header, p.name, v)
		}
		if !judgeParam(p, judged) {
			req.valid = false
			req.why = fmt.Sprintf("%s %q", p.name, judged)
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	req.path = path
	if op.body != nil {
		req.body = g.body(op.body)
		if !judge(op.body.sch, []byte(req.body)) {
			req.valid = false
			req.why = "the body"
		}
		var fields map[string]any
		dec := json.NewDecoder(strings.NewReader(req.body))
		dec.UseNumber()
		if dec.Decode(&fields) == nil {
			for _, p := range op.body.props {
				if n, ok := fields[p.name].(json.Number); ok && p.refers != "" {
					if r, ok := new(big.Rat).SetString(string(n)); ok {
						req.refs[p.refers] = r
					}
				}
			}
		}
	}
	return req
}

// body makes a request body: each required property and some optional
// ones with values their schemas take, then often one thing wrong.
func (g *genDoc) body(b *genBody) string {
	type field struct{ name, lit string }
	var fields []field
	for _, p := range b.props {
		if !p.required && g.rng.IntN(2) == 0 {
			continue
		}
		lit := p.valid[g.rng.IntN(len(p.valid))]
		if ids := g.known[p.refers]; len(ids) > 0 && g.rng.IntN(5) > 0 {
			forms := integerForms(big.NewInt(ids[g.rng.IntN(len(ids))]))
			lit = forms[g.rng.IntN(len(forms))]
		}
		fields = append(fields, field{p.name, lit})
	}
	switch g.rng.IntN(8) {
	case 0, 1: // one property's value refused by its schema
		p := b.props[g.rng.IntN(len(b.props))]
		if len(p.invalid) > 0 {
			fields = slices.DeleteFunc(fields, func(f field) bool { return f.name == p.name })
			fields = append(fields, field{p.name, p.invalid[g.rng.IntN(len(p.invalid))]})
		}
	case 2: // a property missing
		if len(fields) > 0 {
			fields = slices.Delete(fields, 0, 1)
		}
	case 3: // a property the schema does not name
		fields = append(fields, field{[]string{"colour", "id", "Name", "extra"}[g.rng.IntN(4)], `"x"`})
	}
	g.rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	var sb strings.Builder
	sb.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(jsonString(f.name) + ":" + f.lit)
	}
	sb.WriteByte('}')
	return sb.String()
}

// exampleBody is a POST's example with a name made unique by i and its
// references pointed at records made before.
func (g *genDoc) exampleBody(b *genBody, ex any, i int) string {
	m := maps.Clone(obj(ex))
	for _, p := range b.props {
		if ids := g.known[p.refers]; len(ids) > 0 {
			m[p.name] = ids[i%len(ids)]
		}
		if s, ok := m[p.name].(string); ok && p.name == "name" {
			m[p.name] = s + " " + strconv.Itoa(i)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		g.t.Fatal(err)
	}
	return string(out)
}

// noteCreated keeps the id of a record that op's 201 created.
func (g *genDoc) noteCreated(op *genOp, r response) {
	var rec struct{ ID int64 }
	if op.creates == "" || json.Unmarshal(r.body, &rec) != nil || rec.ID < 1 {
		return
	}
	if !slices.Contains(g.known[op.creates], rec.ID) {
		g.known[op.creates] = append(g.known[op.creates], rec.ID)
	}
}

// missingReference reports whether a 400 refused what JSON Schema cannot
// state: a reference, in the body, to a record that does not exist.
func (g *genDoc) missingReference(req genRequest, e apiError) bool {
	if !strings.Contains(e.Message, "does not name an existing") {
		return false
	}
	for kind, r := range req.refs {
		if !r.IsInt() || !r.Num().IsInt64() || !slices.Contains(g.known[kind], r.Num().Int64()) {
			return true
		}
	}
	return false
}

// checkResponse says what is wrong with an answer, if anything: a status
// the operation does not document, or a body its schema refuses.
func (op *genOp) checkResponse(r response) string {
	if !op.documented[r.status] {
		return "an undocumented status"
	}
	sch := op.responses[r.status]
	if op.method == "HEAD" || sch == nil {
		return ""
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.body))
	if err != nil {
		return fmt.Sprintf("the body is not JSON: %v", err)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Sprintf("the body does not validate: %v", err)
	}
	return ""
}

// judge reports whether sch takes the JSON text body.
func judge(sch *jsonschema.Schema, body []byte) bool {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	return err == nil && sch.Validate(inst) == nil
}

// judgeParam reports whether p's schema takes the value v: a number when
// the schema wants an integer and v is written as one, else a string.
func judgeParam(p *genParam, v string) bool {
	var inst any = v
	if p.integer && v != "" && json.Valid([]byte(v)) && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') {
		inst = json.Number(v)
	}
	return p.sch.Validate(inst) == nil
}

func (g *genDoc) compile(ptr string) *jsonschema.Schema {
	g.t.Helper()
	sch, err := g.c.Compile("mem:///openapi.json#" + ptr)
	if err != nil {
		g.t.Fatalf("compile %s: %v", ptr, err)
	}
	return sch
}

// resolve follows v's $ref, if it has one, within the document.
func (g *genDoc) resolve(v any) map[string]any {
	m, _ := g.resolveAt(v, "")
	return m
}

// resolveAt is resolve that also returns the pointer of what it found, v
// being at ptr.
func (g *genDoc) resolveAt(v any, ptr string) (map[string]any, string) {
	m := obj(v)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m, ptr
		}
		ptr = strings.TrimPrefix(ref, "#")
		target := any(g.raw)
		for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			target = obj(target)[tok]
		}
		m = obj(target)
	}
	return m, ptr
}

// integerLiterals are JSON numbers (and, in a body, other JSON values) to
// try where an integer goes: its bounds and examples, their neighbours,
// random ones, and, in a body, the same integers written with a fraction
// or an exponent, and numbers that are not integers.
func (g *genDoc) integerLiterals(s map[string]any, examples []any, body bool) []string {
	lo, hasLo := bigOf(s["minimum"])
	hi, hasHi := bigOf(s["maximum"])
	var vals []*big.Int
	one := big.NewInt(1)
	if hasLo {
		vals = append(vals, lo, new(big.Int).Sub(lo, one), new(big.Int).Add(lo, one))
	} else {
		lo = big.NewInt(-1000)
	}
	if hasHi {
		vals = append(vals, hi, new(big.Int).Sub(hi, one), new(big.Int).Add(hi, one))
	} else {
		hi = new(big.Int).Add(lo, big.NewInt(1000))
	}
	for _, ex := range examples {
		if v, ok := bigOf(ex); ok {
			vals = append(vals, v)
		}
	}
	span := new(big.Int).Sub(hi, lo)
	if !span.IsInt64() || span.Int64() > 1000 {
		span = big.NewInt(1000)
	}
	for range 8 {
		vals = append(vals, new(big.Int).Add(lo, big.NewInt(g.rng.Int64N(span.Int64()+1))))
	}
	maxInt64 := big.NewInt(1<<63 - 1)
	vals = append(vals, big.NewInt(0), big.NewInt(-1), maxInt64, new(big.Int).Add(maxInt64, one),
		new(big.Int).Exp(big.NewInt(10), big.NewInt(20), nil))
	var lits []string
	for _, v := range vals {
		if body {
			lits = append(lits, integerForms(v)...)
		} else {
			lits = append(lits, v.String())
		}
	}
	if body {
		lits = append(lits, "1.5", "1.00000000000000000001", "0.1", "1e-400", "1e400", "-1e400", "-0", "-0.0", "1E+0", "0.5e1")
	}
	return lits
}

// integerForms writes v as JSON numbers of equal value: digits, with a
// fraction of zeros, with exponents.
func integerForms(v *big.Int) []string {
	s := v.String()
	digits := strings.TrimPrefix(s, "-")
	sign := s[:len(s)-len(digits)]
	forms := []string{s, s + ".0", s + "e0", s + "E+0", s + "0e-1", s + "00E-2", s + ".000e0"}
	if len(digits) > 1 {
		forms = append(forms, sign+digits[:1]+"."+digits[1:]+"e"+strconv.Itoa(len(digits)-1))
	}
	if t := strings.TrimRight(digits, "0"); t != "" && len(t) < len(digits) {
		forms = append(forms, sign+t+"e"+strconv.Itoa(len(digits)-len(t)))
	}
	return forms
}

// stringValues are strings to try for a string schema: its examples and
// enum, strings drawn from its pattern and the same broken, and random
// ones of the lengths around its bounds with white space, controls,
// invisible and other characters of note.
func (g *genDoc) stringValues(s map[string]any, examples []any) []string {
	var out []string
	for _, ex := range examples {
		if v, ok := ex.(string); ok {
			out = append(out, v, " "+v+" ", "\"")
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		for _, e := range enum {
			v := e.(string)
			out = append(out, v, strings.ToUpper(v), v+" ", "x"+v)
		}
	}
	if p, ok := s["pattern"].(string); ok {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			g.t.Fatalf("pattern %q: %v", p, err)
		}
		for range 40 {
			var sb strings.Builder
			genRegexp(g.rng, re, &sb)
			v := sb.String()
			out = append(out, v, g.mutate(v))
		}
	}
	lengths := []int{0, 1, 2, 3, 10, 99, 100, 101, 102, 255, 256}
	for _, k := range []string{"minLength", "maxLength"} {
		if n, ok := bigOf(s[k]); ok && n.IsInt64() {
			lengths = append(lengths, int(n.Int64())-1, int(n.Int64()), int(n.Int64())+1)
		}
	}
	for range 60 {
		n := lengths[g.rng.IntN(len(lengths))]
		if g.rng.IntN(3) == 0 {
			n = g.rng.IntN(120)
		}
		out = append(out, g.randomString(max(n, 0)))
	}
	for _, n := range lengths { // printable ASCII only, and the same in white space
		v := g.asciiString(max(n, 0))
		out = append(out, v, string(g.spaceRune())+v+string(g.spaceRune()))
	}
	for range 10 { // quoted, as a structured-field string is
		v := g.randomString(1 + g.rng.IntN(20))
		out = append(out, `"`+v+`"`, `"`+strings.ReplaceAll(v, "a", `\"`)+`"`)
	}
	return out
}

// mutate breaks or bends v: a character of note put somewhere in it, or
// white space around it, or it doubled.
func (g *genDoc) mutate(v string) string {
	rs := []rune(v)
	switch g.rng.IntN(4) {
	case 0:
		i := g.rng.IntN(len(rs) + 1)
		return string(rs[:i]) + string(g.noteRune()) + string(rs[i:])
	case 1:
		return string(g.spaceRune()) + v + string(g.spaceRune())
	case 2:
		return v + v
	}
	return strings.TrimSpace(v)
}

// noteTables are the Unicode sets whose characters string rules trip on.
var noteTables = []*unicode.RangeTable{
	unicode.Cc, unicode.Cf, unicode.Zs, unicode.Zl, unicode.Zp, unicode.Bidi_Control,
	unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point, unicode.White_Space,
	unicode.Prepended_Concatenation_Mark, unicode.Mn, unicode.So, unicode.Co,
}

// noteRune returns a character of note: one of noteTables's, or any code
// point at all.
func (g *genDoc) noteRune() rune {
	if g.rng.IntN(8) == 0 {
		for {
			if r := g.rng.Int32N(unicode.MaxRune + 1); r < 0xD800 || r > 0xDFFF {
				return r
			}
		}
	}
	return tableRune(g.rng, noteTables[g.rng.IntN(len(noteTables))])
}

func (g *genDoc) spaceRune() rune { return tableRune(g.rng, unicode.White_Space) }

// randomString returns n characters: mostly ASCII letters and digits,
// some characters of note, sometimes in or between white space.
func (g *genDoc) randomString(n int) string {
	var sb strings.Builder
	mode := g.rng.IntN(6)
	for i := range n {
		switch {
		case mode == 0: // white space only
			sb.WriteRune(g.spaceRune())
		case mode == 1 && (i == 0 || i == n-1): // surrounded by white space
			sb.WriteRune(g.spaceRune())
		case g.rng.IntN(12) == 0:
			sb.WriteRune(g.noteRune())
		default:
			const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_.'"
			sb.WriteByte(alnum[g.rng.IntN(len(alnum))])
		}
	}
	return sb.String()
}

// asciiString returns n printable ASCII characters, mostly letters.
func (g *genDoc) asciiString(n int) string {
	var sb strings.Builder
	for range n {
		if g.rng.IntN(8) == 0 {
			sb.WriteByte(byte(0x20 + g.rng.IntN(0x5f)))
		} else {
			sb.WriteByte(byte('a' + g.rng.IntN(26)))
		}
	}
	return sb.String()
}

// tableRune returns a random code point of t.
func tableRune(rng *rand.Rand, t *unicode.RangeTable) rune {
	n16, n32 := len(t.R16), len(t.R32)
	i := rng.IntN(n16 + n32)
	var lo, hi, stride rune
	if i < n16 {
		r := t.R16[i]
		lo, hi, stride = rune(r.Lo), rune(r.Hi), rune(r.Stride)
	} else {
		r := t.R32[i-n16]
		lo, hi, stride = rune(r.Lo), rune(r.Hi), rune(r.Stride)
	}
	return lo + stride*rng.Int32N((hi-lo)/stride+1)
}

// genRegexp writes a string that re matches: repetitions drawn toward
// their bounds, a class's character from a random one of its ranges.
func genRegexp(rng *rand.Rand, re *syntax.Regexp, sb *strings.Builder) {
	switch re.Op {
	case syntax.OpLiteral:
		sb.WriteString(string(re.Rune))
	case syntax.OpCharClass:
		for {
			i := rng.IntN(len(re.Rune) / 2)
			lo, hi := re.Rune[2*i], re.Rune[2*i+1]
			if r := lo + rng.Int32N(hi-lo+1); r < 0xD800 || r > 0xDFFF {
				sb.WriteRune(r)
				return
			}
		}
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		sb.WriteRune(rune('a' + rng.IntN(26)))
	case syntax.OpCapture:
		genRegexp(rng, re.Sub[0], sb)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			genRegexp(rng, sub, sb)
		}
	case syntax.OpAlternate:
		genRegexp(rng, re.Sub[rng.IntN(len(re.Sub))], sb)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := 0, 4
		switch re.Op {
		case syntax.OpPlus:
			lo = 1
		case syntax.OpQuest:
			hi = 1
		case syntax.OpRepeat:
			lo, hi = re.Min, re.Max
			if hi < 0 {
				hi = lo + 4
			}
		}
		n := lo + rng.IntN(hi-lo+1)
		switch rng.IntN(4) {
		case 0:
			n = lo
		case 1:
			n = hi
		}
		for range n {
			genRegexp(rng, re.Sub[0], sb)
		}
	}
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// bigOf returns a JSON number of the document as an integer.
func bigOf(v any) (*big.Int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() {
		return nil, false
	}
	return r.Num(), true
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pointerToken escapes s as a token of a JSON pointer in a URL fragment.
func pointerToken(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
	return url.PathEscape(s)
}
