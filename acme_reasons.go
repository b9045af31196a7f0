// acme_reasons.go owns what a failed ACME attempt logs of the CA's
// reasons. autocert tries each challenge type in an order of its own and,
// once all failed, returns only "no viable challenge type found": the
// errors the CA gave for each challenge are dropped on the way. So the
// CA's client reads them from the CA's answers (challengeWatch), and the
// log line names each challenge, the port the CA went to and its reason.

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"golang.org/x/crypto/acme"
)

// challengePorts are the ports a CA connects to for each challenge type,
// of the name's address: RFC 8555 section 8.3 (HTTP-01) and RFC 8737
// (TLS-ALPN-01). A test CA may be told others.
var challengePorts = map[string]string{"http-01": "80", "tls-alpn-01": "443"}

// challengeError is the CA's reason for refusing one challenge.
type challengeError struct {
	typ  string // tls-alpn-01, http-01
	port string // where the CA connected: its validation record's, else challengePorts'
	err  *acme.Error
}

func (e *challengeError) Error() string {
	if e.port == "" {
		return e.typ + ": " + problemText(e.err)
	}
	return fmt.Sprintf("%s to port %s: %s", e.typ, e.port, problemText(e.err))
}

func (e *challengeError) Unwrap() error { return e.err }

// problemText is the CA's problem as the log writes it: its type without
// the URN prefix, its detail, and any subproblems.
func problemText(e *acme.Error) string {
	s := strings.TrimPrefix(e.ProblemType, "urn:ietf:params:acme:error:") + ": " + e.Detail
	var subs []string
	for _, sp := range e.Subproblems {
		subs = append(subs, strings.TrimPrefix(sp.Type, "urn:ietf:params:acme:error:")+": "+sp.Detail)
	}
	if len(subs) > 0 {
		s += " (" + strings.Join(subs, "; ") + ")"
	}
	return s
}

// describeChallenges writes the CA's reasons for the failed authorizations,
// oldest first, in one line; empty for none.
func describeChallenges(failed []*acme.AuthorizationError) string {
	var reasons []string
	for _, ae := range failed {
		for _, err := range ae.Errors {
			if pe, ok := err.(*acme.Error); ok {
				reasons = append(reasons, problemText(pe))
			} else {
				reasons = append(reasons, err.Error())
			}
		}
	}
	return strings.Join(reasons, "; ")
}

// challengeWatch is the transport of one attempt's ACME client: it hands
// every request to base and every answer back unchanged, and keeps the
// authorizations that the CA answered as invalid, each once.
type challengeWatch struct {
	base   http.RoundTripper
	mu     sync.Mutex
	failed []*acme.AuthorizationError
}

// maxWatchedAnswer bounds the answer challengeWatch reads: an
// authorization is a few hundred bytes; a longer answer (a certificate
// chain) is handed on unread.
const maxWatchedAnswer = 64 << 10

// maxWatchedFailures bounds what is kept: the attempt's few, and a
// renewal's, whose Manager keeps the client for months.
const maxWatchedFailures = 8

func (w *challengeWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(r)
	if err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp, err
	}
	head, rerr := io.ReadAll(io.LimitReader(resp.Body, maxWatchedAnswer+1))
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if rerr == nil && len(head) <= maxWatchedAnswer {
		if ae := failedAuthorization(r.URL.String(), head); ae != nil {
			w.keep(ae)
		}
	}
	return resp, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

func (w *challengeWatch) keep(ae *acme.AuthorizationError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.failed {
		if f.URI == ae.URI {
			return
		}
	}
	w.failed = append(w.failed, ae)
	if len(w.failed) > maxWatchedFailures {
		w.failed = w.failed[1:]
	}
}

// describe writes the reasons kept (describeChallenges).
func (w *challengeWatch) describe() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return describeChallenges(w.failed)
}

// failedAuthorization reads an answer of the CA at uri: an authorization
// that is invalid, with the reason of each challenge that failed, or nil
// for anything else.
func failedAuthorization(uri string, body []byte) *acme.AuthorizationError {
	var z struct {
		Status     string
		Identifier struct{ Value string }
		Challenges []struct {
			Type  string
			Error *struct {
				Type, Detail string
				Status       int
				Subproblems  []struct{ Type, Detail string }
			}
			ValidationRecord []struct{ Port json.RawMessage }
		}
	}
	if json.Unmarshal(body, &z) != nil || z.Status != acme.StatusInvalid {
		return nil
	}
	ae := &acme.AuthorizationError{URI: uri, Identifier: z.Identifier.Value}
	for _, c := range z.Challenges {
		if c.Error == nil {
			continue
		}
		port := challengePorts[c.Type]
		for _, vr := range c.ValidationRecord {
			if p := strings.Trim(string(vr.Port), `"`); p != "" {
				port = p
			}
		}
		pe := &acme.Error{StatusCode: c.Error.Status, ProblemType: c.Error.Type, Detail: c.Error.Detail}
		for _, sp := range c.Error.Subproblems {
			pe.Subproblems = append(pe.Subproblems, acme.Subproblem{Type: sp.Type, Detail: sp.Detail})
		}
		ae.Errors = append(ae.Errors, &challengeError{typ: c.Type, port: port, err: pe})
	}
	if len(ae.Errors) == 0 {
		return nil
	}
	return ae
}
