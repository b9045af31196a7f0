package main

import (
	"database/sql"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// testVariables are the variables that let more tests run, as the
// README's table lists them; a test that needs one skips without it.
var testVariables = []struct{ name, what string }{
	{postgresEnv, "PostgreSQL"},
	{redisEnv, "Redis"},
	{browserEnv, "Chromium"},
	{promtoolEnv, "promtool"},
	{codegenEnv, "the client generators"},
	{pebbleEnv, "the ACME test CA"},
	{socketActivateEnv, "systemd-socket-activate"},
	{pgBinEnv, "PostgreSQL's server binaries, for the failover tests"},
}

// TestMain lets a test re-run this binary as the real petstore process
// (for kill tests): with PETSTORE_TEST_MAIN=1 it is main. Otherwise it
// first says, in one line on stderr, which test variables are unset: go
// test shows it in local directory mode (the README's command) and with
// -v, where a skipped test's own line shows only with -v.
func TestMain(m *testing.M) {
	if os.Getenv("PETSTORE_TEST_MAIN") == "1" {
		main()
		return
	}
	if path := os.Getenv("PETSTORE_TEST_LOCK"); path != "" {
		lockDatabase(path)
	}
	var unset []string
	for _, v := range testVariables {
		if os.Getenv(v.name) == "" {
			unset = append(unset, v.name+" ("+v.what+")")
		}
	}
	if len(unset) > 0 {
		fmt.Fprintf(os.Stderr, "petstore tests: not set, so the tests that need them skip: %s; see the README's Quick start\n", strings.Join(unset, ", "))
	}
	code := m.Run()
	removePGTemplate()
	os.Exit(code)
}

// lockDatabase is what this test binary does when TestMain finds
// PETSTORE_TEST_LOCK: it takes the write lock of that database, says
// "locked" on stdout, and holds the lock until stdin closes.
func lockDatabase(path string) {
	db, err := sql.Open("sqlite", sqliteDSN(path, false, time.Second))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	tx, err := db.Begin() // _txlock=immediate: takes the write lock now
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	tx.Rollback()
	os.Exit(0)
}
