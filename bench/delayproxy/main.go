// Command delayproxy is a TCP proxy that delays every byte by the same
// time in each direction, keeping the order and the gaps between writes:
// a far database on loopback, for bench/farpg.sh. It prints its address
// and serves until killed.
//
//	delayproxy TARGET DELAY     # e.g. 127.0.0.1:5432 20ms
package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: delayproxy TARGET DELAY")
		os.Exit(2)
	}
	target := os.Args[1]
	delay, err := time.ParseDuration(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			up, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				c.Close()
				return
			}
			go pipe(up, c, delay)
			pipe(c, up, delay)
		}()
	}
}

// pipe copies src to dst, each piece delay after it was read.
func pipe(dst, src net.Conn, delay time.Duration) {
	type piece struct {
		at   time.Time
		data []byte
	}
	q := make(chan piece, 4096)
	go func() {
		defer dst.Close()
		for p := range q {
			time.Sleep(time.Until(p.at))
			if _, err := dst.Write(p.data); err != nil {
				for range q {
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- piece{time.Now().Add(delay), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(q)
}
