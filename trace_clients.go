// trace_clients.go owns the spans of petstore's calls to other services
// than its database: Redis, where the shared rate limits are, and the ACME
// CA, which issues the certificates.

package main

import (
	"net/http"
	"time"
)

// redisSpan is the span of a request's rate-limit decision, made where the
// limits are shared in Redis: a decision that asked Redis nothing for this
// request (it is down, or the key's lease covered it) leaves no span.
type redisSpan struct {
	sp *span
}

// startRedis starts the span of r's rate-limit decision by lim, when r
// records spans and lim keeps its limits in Redis.
func startRedis(r *http.Request, lim rateLimiter) redisSpan {
	st := stateOf(r)
	if st == nil || !st.trace.recording() {
		return redisSpan{}
	}
	b := lim.backend()
	if !b.shared {
		return redisSpan{}
	}
	sp := st.trace.child("EVALSHA", spanClient)
	sp.setString("db.system.name", "redis")
	sp.setString("db.operation.name", "EVALSHA")
	return redisSpan{sp}
}

// end ends the span when the decision asked Redis for this request (not
// one decided from its lease in memory, whatever the lease's background
// calls do), with its answer.
func (s redisSpan) end(lim rateLimiter, d decision) {
	if s.sp == nil || !d.ViaRedis {
		return
	}
	b := lim.backend()
	s.sp.setBool("petstore.ratelimit.allowed", d.Allowed)
	if !b.up {
		s.sp.fail()
	}
	s.sp.finish()
}

// acmeSpan starts the root span of an attempt at a certificate for name
// from the ACME CA: its own trace, for no request waits on it, sampled as
// any new trace is. nil with tracing off or when the sampler leaves it out.
func (tr *tracer) acmeSpan(name string) *span {
	if tr == nil {
		return nil
	}
	id := newTraceID()
	if !tr.sampler.sample(id, false, false) {
		return nil
	}
	sp := &span{tr: tr, trace: id, id: newSpanID(), sampled: true, name: "acme certificate",
		kind: spanInternal, start: time.Now().UnixNano()}
	sp.setString("petstore.acme.domain", name)
	return sp
}

// caTransport is a RoundTripper that makes a client span, under parent,
// of each call to the ACME CA: the method, the host and the status,
// nothing of the URL's path (an order's or account's id) or of the body.
type caTransport struct {
	parent *span
	next   http.RoundTripper
}

// caTransport returns next, with a span of each call under parent when it
// records.
func traceCA(parent *span, next http.RoundTripper) http.RoundTripper {
	if !parent.recording() {
		return next
	}
	return caTransport{parent, next}
}

func (t caTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	sp := t.parent.child(r.Method, spanClient)
	sp.setString("http.request.method", r.Method)
	sp.setString("server.address", r.URL.Hostname())
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		sp.fail()
	} else {
		sp.setInt("http.response.status_code", int64(resp.StatusCode))
		if resp.StatusCode >= 500 {
			sp.fail()
		}
	}
	sp.finish()
	return resp, err
}
