//go:build pprof

// pprof.go is built only with -tags pprof (bench/profile.sh): it serves
// net/http/pprof on PETSTORE_PPROF_ADDR, so that a profile is taken of the
// real binary under the harness's load. The default build has no pprof at
// all, on any listener.

package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("PETSTORE_PPROF_ADDR"); addr != "" {
		go http.ListenAndServe(addr, nil) // DefaultServeMux: pprof's handlers only
	}
}
