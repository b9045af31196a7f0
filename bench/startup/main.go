// Command startup measures exec to first 2xx: it starts the command after
// "--" (with {addr} replaced by a free loopback address), GETs url until a
// 2xx, stops the process, and prints the median over -runs in milliseconds.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	path := flag.String("path", "/healthz", "path to GET")
	key := flag.String("key", "", "API key sent as Bearer token")
	runs := flag.Int("runs", 10, "how many starts")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: startup [-path P] [-key K] [-runs N] -- command args... ({addr} is replaced)")
		os.Exit(2)
	}
	var times []time.Duration
	for range *runs {
		d, err := once(args, *path, *key)
		if err != nil {
			fmt.Fprintln(os.Stderr, "startup:", err)
			os.Exit(1)
		}
		times = append(times, d)
	}
	slices.Sort(times)
	fmt.Printf("%.2f\n", float64(times[len(times)/2].Microseconds())/1000)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func once(args []string, path, key string) (time.Duration, error) {
	addr, err := freeAddr()
	if err != nil {
		return 0, err
	}
	argv := make([]string, len(args))
	for i, a := range args {
		argv[i] = strings.ReplaceAll(a, "{addr}", addr)
	}
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	// A fresh connection per try: a kept-alive one cannot exist before the
	// server listens, and refused dials are what we are waiting through.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	for time.Since(start) < 10*time.Second {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return time.Since(start), nil
			}
		}
	}
	return 0, fmt.Errorf("%s: no 2xx within 10 s", strings.Join(argv, " "))
}
