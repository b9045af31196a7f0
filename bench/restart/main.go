// Command restart measures how long a restart of petstore serve without
// socket activation refuses connections: it starts the binary on a free
// loopback port, then -runs times sends SIGTERM, waits for the process to
// exit (as a supervisor does), and starts it again, while a client
// connects every 2 ms. It prints, per restart, the span from the first to
// the last refused connection, and their median.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	runs := flag.Int("runs", 7, "how many restarts")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: restart [-runs N] PETSTORE-BINARY")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "restart")
	check(err)
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	addr := ln.Addr().String()
	ln.Close()
	start := func() *exec.Cmd {
		cmd := exec.Command(flag.Arg(0), "serve", "--db", filepath.Join(dir, "r.db"), "--addr", addr, "--admin-addr", "off")
		out, err := cmd.StderrPipe()
		check(err)
		check(cmd.Start())
		sc := bufio.NewScanner(out)
		for sc.Scan() && !strings.Contains(sc.Text(), "msg=listening") {
		}
		go func() {
			for sc.Scan() {
			}
		}()
		return cmd
	}
	cmd := start()
	var windows []time.Duration
	for run := 1; run <= *runs; run++ {
		var mu sync.Mutex
		var refused []time.Time
		connects := 0
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for n := 0; n < 20_000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				t := time.Now()
				c, err := net.DialTimeout("tcp", addr, time.Second)
				mu.Lock()
				connects++
				if err != nil {
					refused = append(refused, t)
				} else {
					c.Close()
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
		time.Sleep(200 * time.Millisecond)
		t0 := time.Now()
		check(cmd.Process.Signal(syscall.SIGTERM))
		cmd.Wait()
		t1 := time.Now()
		cmd = start()
		t2 := time.Now()
		time.Sleep(200 * time.Millisecond)
		close(stop)
		<-done
		var window time.Duration
		if len(refused) > 0 {
			window = refused[len(refused)-1].Sub(refused[0])
		}
		windows = append(windows, window)
		fmt.Printf("restart %d: old exited %v after SIGTERM, new listening %v later; refused for %v (%d of %d connects)\n",
			run, t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), window.Round(time.Millisecond), len(refused), connects)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	slices.Sort(windows)
	fmt.Printf("refused: min %v, median %v, max %v\n", windows[0].Round(time.Millisecond),
		windows[len(windows)/2].Round(time.Millisecond), windows[len(windows)-1].Round(time.Millisecond))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
