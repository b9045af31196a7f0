// Command idleconns holds idle connections to a petstore serving HTTPS,
// for bench/conns.sh's peak RSS: N connections from 127.0.0.1, each one
// GET /v1/categories with the key over h2 (mode h2) or HTTP/1.1 (h1) and
// then idle, or the HTTP/2 preface and SETTINGS and no stream (silent).
// It prints how many were opened and how many failed (refused at accept by
// --max-conns-per-addr), then holds them until stdin closes.
//
//	idleconns ADDR CERT-FILE KEY MODE N
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	addr, certFile, key, mode := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	n, _ := strconv.Atoi(os.Args[5])
	pem, _ := os.ReadFile(certFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	var conns []net.Conn
	var clients []*http.Transport
	failed := 0
	for range n {
		switch mode {
		case "silent":
			c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
			if err != nil {
				failed++
				continue
			}
			io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
			conns = append(conns, c)
		default:
			p := new(http.Protocols)
			p.SetHTTP1(mode == "h1")
			p.SetHTTP2(mode == "h2")
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Protocols: p}
			req, _ := http.NewRequest("GET", "https://"+addr+"/v1/categories", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				failed++
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			clients = append(clients, tr)
		}
	}
	time.Sleep(time.Second)
	fmt.Printf("%s: %d opened, %d failed\n", mode, len(conns)+len(clients), failed)
	io.Copy(io.Discard, os.Stdin)
}
