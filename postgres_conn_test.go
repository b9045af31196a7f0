package main

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sys/unix"
)

// TestPostgresConnConfig: how the pool's and the ACME lock's connections are made
// (DECISIONS.md section 19). With several hosts and no
// target_session_attrs, only to a read-write one; 2 s per host without a
// connect_timeout, the URL's when it has one, never more than the busy
// timeout (half of it with several hosts: the next host must have time);
// and every connection, the pool's and the ACME lock's, dialled
// with TCP keepalives and a TCP_USER_TIMEOUT of at most 10 s. No server
// needed: the dialer is tried on a listener of the test's.
func TestPostgresConnConfig(t *testing.T) {
	tests := []struct {
		db        string
		busy      time.Duration
		timeout   time.Duration
		readWrite bool
	}{
		{"postgres://u@127.0.0.1:1/x", 5 * time.Second, 2 * time.Second, false},
		{"postgres://u@127.0.0.1:1,127.0.0.1:2/x", 5 * time.Second, 2 * time.Second, true},
		{"postgres://u@[::1]:1,[::1]:2/x?sslmode=disable", 5 * time.Second, 2 * time.Second, true},
		{"postgres://u@127.0.0.1:1,127.0.0.1:2/x?connect_timeout=1", 5 * time.Second, time.Second, true},
		{"postgres://u@127.0.0.1:1,127.0.0.1:2/x?connect_timeout=10", 5 * time.Second, 2500 * time.Millisecond, true},
		{"postgres://u@127.0.0.1:1/x?connect_timeout=10", 5 * time.Second, 5 * time.Second, false},
		{"postgres://u@127.0.0.1:1,127.0.0.1:2/x", time.Second, 500 * time.Millisecond, true},
		{"postgres://u@127.0.0.1:1/x", time.Second, time.Second, false},
		{"postgres://u@127.0.0.1:1,127.0.0.1:2/x?target_session_attrs=any", 5 * time.Second, 2 * time.Second, false},
		{"postgres://u@127.0.0.1:1/x?target_session_attrs=read-write", 5 * time.Second, 2 * time.Second, true},
	}
	for _, tt := range tests {
		cfg, err := postgresConfig(tt.db, storeOptions{busy: tt.busy})
		if err != nil {
			t.Fatalf("%s: %v", tt.db, err)
		}
		cc := cfg.ConnConfig
		if cc.ConnectTimeout != tt.timeout {
			t.Errorf("%s, busy %v: connect timeout %v, want %v", tt.db, tt.busy, cc.ConnectTimeout, tt.timeout)
		}
		if got := cc.ValidateConnect != nil; got != tt.readWrite {
			t.Errorf("%s: read-write only = %v, want %v", tt.db, got, tt.readWrite)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cfg, err := postgresConfig("postgres://u@"+ln.Addr().String()+",127.0.0.1:1/x", storeOptions{busy: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, dial := range []struct {
		name string
		fn   pgconn.DialFunc
	}{
		{"pool", cfg.ConnConfig.DialFunc},
		{"acme lock", newPgACMELock(cfg.ConnConfig, "s").cfg.DialFunc},
	} {
		c, err := dial.fn(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("%s: dial: %v", dial.name, err)
		}
		raw, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var userTimeout, keepAlive, idle int
		var serr error
		raw.Control(func(fd uintptr) {
			if userTimeout, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT); serr != nil {
				return
			}
			if keepAlive, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE); serr != nil {
				return
			}
			idle, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		})
		c.Close()
		if serr != nil {
			t.Fatal(serr)
		}
		if userTimeout <= 0 || userTimeout > 10000 {
			t.Errorf("%s connections: TCP_USER_TIMEOUT %d ms, want 1 to 10000", dial.name, userTimeout)
		}
		if keepAlive == 0 || idle <= 0 || idle > 10 {
			t.Errorf("%s connections: SO_KEEPALIVE %d, TCP_KEEPIDLE %d s; want keepalives within 10 s", dial.name, keepAlive, idle)
		}
	}
}

// TestPostgresLocksRefuseReadOnly: the ACME lock connection takes no lock
// on a read-only server (a fenced old primary, here a session with
// default_transaction_read_only): a lock there keeps no other instance
// out; it answers errDBAway (503, Retry-After: 1), and so does a keyed
// create's flight there. On a read-write session both work as before.
func TestPostgresLocksRefuseReadOnly(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	openTestStore(t, db) // migrated
	for _, readOnly := range []bool{false, true} {
		url := db
		if readOnly {
			url += "&default_transaction_read_only=on"
		}
		s, err := openStore(context.Background(), url, storeOptions{now: time.Now, busy: defaultBusyTimeout})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		w := &idemWrite[Category]{idemRequest: idemRequest{KeyID: 1, Key: "ro", Owner: 1, Now: now, Since: now.Add(-time.Hour)},
			answer: func(Category, error) (int, []byte, bool) { return 0, nil, false }}
		_, err = s.CreateCategory(context.Background(), Category{Name: "ro"}, "ro", w)
		if readOnly != errors.Is(err, errDBAway) || (!readOnly && err != nil) {
			t.Errorf("read-only %v: a keyed create: %v", readOnly, err)
		}
		unlock, err := s.ACMELock(context.Background())
		if readOnly != errors.Is(err, errDBAway) || (!readOnly && err != nil) {
			t.Errorf("read-only %v: the ACME issuer lock: %v", readOnly, err)
		}
		if err == nil {
			var taken bool
			conn := pmConnect(t, db)
			if err := conn.QueryRow(context.Background(), "SELECT pg_try_advisory_lock($1)", s.(*pgStore).acmeLock.key).Scan(&taken); err != nil {
				t.Fatal(err)
			}
			if taken {
				t.Error("the ACME issuer lock was free while held")
			}
			unlock()
		}
		s.Close()
	}
}
