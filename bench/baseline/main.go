// Command baseline is the yardstick of bench/run.sh: a bare net/http server
// answering petstore's category paths with no database, auth, limits or logs,
// so the table shows what petstore's own work costs on the same machine.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
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

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen address")
	n := flag.Int("categories", 100, "categories in the precomputed GET answer")
	flag.Parse()

	list := categories(*n)
	created := []byte(`{"id":1,"name":"x","description":"created"}`)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/categories", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
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
	log.Fatal(http.ListenAndServe(*addr, mux))
}
