// Command otlpsink is the OTLP/HTTP collector of bench/traces.sh: it takes
// every export (reads the body, answers 200) and counts the bytes, so that
// the benchmark measures petstore's side of exporting, not a collector's.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
)

func main() {
	var n, b atomic.Int64
	http.HandleFunc("/v1/traces", func(w http.ResponseWriter, r *http.Request) {
		k, _ := io.Copy(io.Discard, r.Body)
		n.Add(1)
		b.Add(k)
	})
	http.HandleFunc("/count", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d exports, %d bytes\n", n.Load(), b.Load())
	})
	if err := http.ListenAndServe(os.Args[1], nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
