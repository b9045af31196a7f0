// trace_otlp.go owns the wire format of the spans petstore exports: an
// OTLP ExportTraceServiceRequest in protobuf, written by hand (as
// VictoriaMetrics' easyproto writes OTLP), so that neither gRPC nor a
// protobuf library is in the binary. The field numbers are those of
// opentelemetry-proto's trace.proto, common.proto and resource.proto;
// trace_test.go decodes what this writes with the official definitions.

package main

import "encoding/binary"

// Protobuf wire types.
const (
	wireVarint = 0
	wire64     = 1
	wireBytes  = 2
	wire32     = 5
)

// pbuf appends protobuf fields to b.
type pbuf struct{ b []byte }

func (p *pbuf) varint(v uint64) { p.b = binary.AppendUvarint(p.b, v) }

func (p *pbuf) tag(field, wire int) { p.varint(uint64(field)<<3 | uint64(wire)) }

func (p *pbuf) str(field int, s string) {
	if s == "" {
		return
	}
	p.tag(field, wireBytes)
	p.varint(uint64(len(s)))
	p.b = append(p.b, s...)
}

func (p *pbuf) bytes(field int, v []byte) {
	p.tag(field, wireBytes)
	p.varint(uint64(len(v)))
	p.b = append(p.b, v...)
}

func (p *pbuf) uint(field int, v uint64) {
	if v == 0 {
		return
	}
	p.tag(field, wireVarint)
	p.varint(v)
}

func (p *pbuf) fixed64(field int, v uint64) {
	p.tag(field, wire64)
	p.b = binary.LittleEndian.AppendUint64(p.b, v)
}

func (p *pbuf) fixed32(field int, v uint32) {
	p.tag(field, wire32)
	p.b = binary.LittleEndian.AppendUint32(p.b, v)
}

// begin starts an embedded message, field, and returns where its length
// goes; end writes the length. One byte is kept for it, and the message
// moved when its length needs more.
func (p *pbuf) begin(field int) int {
	p.tag(field, wireBytes)
	p.b = append(p.b, 0)
	return len(p.b) - 1
}

func (p *pbuf) end(at int) {
	n := len(p.b) - at - 1
	if n < 0x80 {
		p.b[at] = byte(n)
		return
	}
	var lb [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(lb[:], uint64(n))
	p.b = append(p.b, lb[:k-1]...)
	copy(p.b[at+k:], p.b[at+1:at+1+n])
	copy(p.b[at:], lb[:k])
}

// keyValue writes a KeyValue (common.proto) as field.
func (p *pbuf) keyValue(field int, a attr) {
	kv := p.begin(field)
	p.str(1, a.key)
	v := p.begin(2) // AnyValue
	switch a.kind {
	case attrString:
		p.tag(1, wireBytes) // string_value, written even when empty
		p.varint(uint64(len(a.s)))
		p.b = append(p.b, a.s...)
	case attrBool:
		p.tag(2, wireVarint)
		p.varint(uint64(a.i))
	case attrInt:
		p.tag(3, wireVarint)
		p.varint(uint64(a.i))
	case attrDouble:
		p.fixed64(4, uint64(a.i))
	}
	p.end(v)
	p.end(kv)
}

// otlpHead is the start of every request's one ResourceSpans: its
// Resource and the InstrumentationScope, encoded once; encodeSpans adds
// the spans.
type otlpHead struct {
	resource []byte // Resource, as field 1 of ResourceSpans
	scope    []byte // InstrumentationScope, as field 1 of ScopeSpans
}

func newOTLPHead(resource []attr, scopeName, scopeVersion string) otlpHead {
	var p pbuf
	r := p.begin(1)
	for _, a := range resource {
		p.keyValue(1, a)
	}
	p.end(r)
	h := otlpHead{resource: p.b}
	var q pbuf
	s := q.begin(1)
	q.str(1, scopeName)
	q.str(2, scopeVersion)
	q.end(s)
	h.scope = q.b
	return h
}

// encodeSpans appends an ExportTraceServiceRequest of spans to b.
func (h otlpHead) encodeSpans(b []byte, spans []*span) []byte {
	p := pbuf{b: b}
	rs := p.begin(1) // ResourceSpans
	p.b = append(p.b, h.resource...)
	ss := p.begin(2) // ScopeSpans
	p.b = append(p.b, h.scope...)
	for _, sp := range spans {
		p.span(2, sp)
	}
	p.end(ss)
	p.end(rs)
	return p.b
}

// span writes sp as a Span (trace.proto) in field.
func (p *pbuf) span(field int, sp *span) {
	m := p.begin(field)
	p.bytes(1, sp.trace[:])
	p.bytes(2, sp.id[:])
	p.str(3, sp.state)
	if sp.parent != (spanID{}) {
		p.bytes(4, sp.parent[:])
	}
	p.str(5, sp.name)
	p.uint(6, uint64(sp.kind))
	p.fixed64(7, uint64(sp.start))
	p.fixed64(8, uint64(sp.end))
	for _, a := range sp.attrs {
		p.keyValue(9, a)
	}
	if sp.status != 0 {
		st := p.begin(15)
		p.uint(3, uint64(sp.status))
		p.end(st)
	}
	// flags: the W3C trace flags (sampled), and whether the parent is
	// remote (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, _IS_REMOTE_MASK).
	flags := uint32(0x100)
	if sp.sampled {
		flags |= 1
	}
	if sp.remote {
		flags |= 0x200
	}
	p.fixed32(16, flags)
	p.end(m)
}
