// Command baseline is the yardstick of bench/run.sh: a bare net/http server
// answering petstore's category paths with no database, auth, limits or logs,
// so the table shows what petstore's own work costs on the same machine.
//
// With -headers and -timeouts it sends, precomputed, the response headers
// petstore sent for the same list and runs with petstore's server timeouts:
// what net/http itself costs for the answer petstore must give, with none
// of petstore's work (auth, limits, log, metrics) behind it.
//
// With -tls-cert and -tls-key it serves HTTPS and counts its handshakes,
// full and resumed, at GET /handshakes: run.sh checks with it that wrk's
// handshakes in the handshake rows are all full ones.
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// The list must be byte-for-byte what run.sh seeds into petstore, or the
// GET comparison measures different payloads.
func categories(n int) []byte {
	type category struct {
		ID          int    `json:"id"`
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	list := make([]category, n)
	for i := range list {
		id := i + 1
		list[i] = category{id, fmt.Sprintf("cat-%03d", id), fmt.Sprintf("Benchmark category number %03d", id)}
	}
	b, err := json.Marshal(list)
	if err != nil {
		panic(err)
	}
	return append(b, '\n') // petstore ends its list with a newline too
}

// readHeaders reads "Name: value" lines, as curl -D prints a response's
// header, skipping the status line and Date (net/http adds its own).
func readHeaders(path string) (http.Header, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	for line := range strings.Lines(string(b)) {
		name, value, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ": ")
		if ok && !strings.HasPrefix(name, "HTTP/") && name != "Date" {
			h[name] = append(h[name], value)
		}
	}
	return h, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen address")
	n := flag.Int("categories", 100, "categories in the precomputed GET answer")
	headers := flag.String("headers", "", "a file of `header` lines (curl -D) to send with the GET list, precomputed")
	timeouts := flag.Bool("timeouts", false, "the server timeouts petstore serve uses by default")
	certFile := flag.String("tls-cert", "", "serve HTTPS with this certificate `file` (and -tls-key)")
	keyFile := flag.String("tls-key", "", "the certificate's key `file`")
	flag.Parse()

	list := categories(*n)
	created := []byte(`{"id":1,"name":"x","description":"created"}`)
	extra := http.Header{"Content-Type": {"application/json"}}
	if *headers != "" {
		h, err := readHeaders(*headers)
		if err != nil {
			log.Fatal(err)
		}
		extra = h
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/categories", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for name, v := range extra {
			h[name] = v
		}
		w.Write(list)
	})
	// Decoding is kept because every real POST pays for it; the 0.40 target
	// is against a server that does only that.
	mux.HandleFunc("POST /v1/categories", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Name        *string `json:"name"`
			Description *string `json:"description"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&in); err != nil || in.Name == nil {
			http.Error(w, `{"status":400}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(created)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"ok"}`))
	})
	srv := &http.Server{Addr: *addr, Handler: mux}
	if *timeouts { // as cli.go's defaults: each costs net/http deadline updates per request
		srv.ReadHeaderTimeout, srv.ReadTimeout = 5*time.Second, 30*time.Second
		srv.WriteTimeout, srv.IdleTimeout = 60*time.Second, 120*time.Second
	}
	if *certFile == "" {
		log.Fatal(srv.ListenAndServe())
	}
	var full, resumed atomic.Int64
	srv.TLSConfig = &tls.Config{VerifyConnection: func(cs tls.ConnectionState) error {
		if cs.DidResume {
			resumed.Add(1)
		} else {
			full.Add(1)
		}
		return nil
	}}
	mux.HandleFunc("GET /handshakes", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "full %d resumed %d\n", full.Load(), resumed.Load())
	})
	log.Fatal(srv.ListenAndServeTLS(*certFile, *keyFile))
}
