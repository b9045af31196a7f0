package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/crypto/acme"
)

// TestACMEChallengeReasons: what a failed attempt logs of the CA's reasons
// names each challenge type, the port the CA went to, and the CA's problem
// without its URN prefix.
func TestACMEChallengeReasons(t *testing.T) {
	failed := []*acme.AuthorizationError{
		{URI: "https://ca/authz/1", Identifier: "api.example.com", Errors: []error{
			&challengeError{typ: "tls-alpn-01", port: "443", err: &acme.Error{StatusCode: 400,
				ProblemType: "urn:ietf:params:acme:error:connection", Detail: "203.0.113.7: Connection refused"}},
		}},
		{URI: "https://ca/authz/2", Identifier: "api.example.com", Errors: []error{
			&challengeError{typ: "http-01", port: "80", err: &acme.Error{StatusCode: 403,
				ProblemType: "urn:ietf:params:acme:error:unauthorized", Detail: "Invalid response from http://api.example.com/.well-known/acme-challenge/x: 404",
				Subproblems: []acme.Subproblem{{Type: "urn:ietf:params:acme:error:dns", Detail: "no AAAA record"}}}},
			&acme.Error{StatusCode: 400, ProblemType: "urn:ietf:params:acme:error:malformed", Detail: "a challenge of no known type"},
		}},
	}
	want := "tls-alpn-01 to port 443: connection: 203.0.113.7: Connection refused; " +
		"http-01 to port 80: unauthorized: Invalid response from http://api.example.com/.well-known/acme-challenge/x: 404 (dns: no AAAA record); " +
		"malformed: a challenge of no known type"
	if got := describeChallenges(failed); got != want {
		t.Errorf("describeChallenges =\n %s\nwant\n %s", got, want)
	}
	if got := describeChallenges(nil); got != "" {
		t.Errorf("describeChallenges(nil) = %q, want empty", got)
	}
}

// fakeCA answers every request with the next body, as JSON.
type fakeCA struct{ bodies []string }

func (f *fakeCA) RoundTrip(r *http.Request) (*http.Response, error) {
	body := f.bodies[0]
	f.bodies = f.bodies[1:]
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

// TestChallengeWatchKeepsTheCAsReasons: challengeWatch reads the failed
// authorizations in the CA's answers (a port from Let's Encrypt's
// validationRecord, or else the one the RFCs name; pebble sends none),
// once each however often the CA is asked, and hands every answer on
// unchanged.
func TestChallengeWatchKeepsTheCAsReasons(t *testing.T) {
	boulder := `{"identifier":{"type":"dns","value":"api.example.com"},"status":"invalid","challenges":[` +
		`{"type":"http-01","status":"invalid","url":"u","token":"t","error":{"type":"urn:ietf:params:acme:error:connection","detail":"Timeout during connect (likely firewall problem)","status":400},` +
		`"validationRecord":[{"url":"http://api.example.com/.well-known/acme-challenge/t","hostname":"api.example.com","port":"8080","addressUsed":"203.0.113.7"}]}]}`
	pebble := `{"status":"invalid","identifier":{"type":"dns","value":"api.example.com"},"challenges":[` +
		`{"type":"tls-alpn-01","url":"u2","token":"t2","status":"invalid","error":{"type":"urn:ietf:params:acme:error:tls","detail":"Cannot negotiate ALPN protocol \"acme-tls/1\" for tls-alpn-01 challenge","status":400}},` +
		`{"type":"http-01","url":"u3","token":"t3","status":"pending"}]}`
	pending := `{"status":"pending","identifier":{"type":"dns","value":"api.example.com"},"challenges":[{"type":"tls-alpn-01","status":"pending"}]}`
	order := `{"status":"invalid","error":{"type":"urn:ietf:params:acme:error:unauthorized","detail":"x"}}`
	bodies := []string{pending, boulder, boulder, pebble, order}
	w := &challengeWatch{base: &fakeCA{bodies: append([]string(nil), bodies...)}}
	urls := []string{"https://ca/authz/1", "https://ca/authz/1", "https://ca/authz/1", "https://ca/authz/2", "https://ca/order/1"}
	for i, u := range urls {
		req, _ := http.NewRequest("POST", u, nil)
		resp, err := w.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(got, []byte(bodies[i])) {
			t.Errorf("answer %d handed on as %q, want %q", i, got, bodies[i])
		}
	}
	want := "http-01 to port 8080: connection: Timeout during connect (likely firewall problem); " +
		`tls-alpn-01 to port 443: tls: Cannot negotiate ALPN protocol "acme-tls/1" for tls-alpn-01 challenge`
	if got := w.describe(); got != want {
		t.Errorf("describe =\n %s\nwant\n %s", got, want)
	}
}
