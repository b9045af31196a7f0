//go:build pprof

// pprof.go is built only with -tags pprof (bench/profile.sh): it serves
// net/http/pprof on PETSTORE_PPROF_ADDR, so that a profile is taken of the
// real binary under the harness's load. The default build has no pprof at
// all, on any listener.

package main

import (
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("PETSTORE_PPROF_ADDR"); addr != "" {
		go func() { // DefaultServeMux: pprof's handlers only
			fmt.Fprintln(os.Stderr, "pprof:", http.ListenAndServe(addr, nil))
		}()
	}
}
