// cli_keys.go owns the keys commands: create, list, rotate, revoke and unban.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("keys: want a subcommand: %s", orList(keySubcommands()))
	}
	sub, args := args[0], args[1:]
	if sub == "-h" || sub == "-help" || sub == "--help" || sub == "help" {
		printUsage(stdout, "petstore keys SUBCOMMAND [flags] [ID]", "keys ")
		return nil
	}
	fs := newFlagSet("keys " + sub)
	db := dbFlag(fs)
	switch sub {
	case "create":
		planName := fs.String("plan", "", "the key's plan, `"+strings.Join(planNames(), "|")+"` (required)")
		name := fs.String("name", "", "a name to recognise the key by, a `TEXT` of at most 100 characters")
		rpm := fs.Int64("rpm", 0, "requests per minute, `N` (enterprise only, required there)")
		rpd := fs.Int64("rpd", 0, "requests per day, `N` (enterprise only, required there)")
		env := fs.String("env", "production", "the key's environment, `"+strings.Join(environments, "|")+"`")
		scope := fs.String("scope", scopeWrite, "the key's scope, `"+strings.Join(keyScopes, "|")+"`: read allows GET and HEAD only (a POST is 403)")
		expires := fs.String("expires", "", "`WHEN` the key stops working: a duration from now (90d, 12h), a date (2027-01-01, 00:00 UTC) or an RFC 3339 time; empty: never")
		asJSON := fs.Bool("json", false, "print a JSON object instead of the key alone")
		if _, err := parseFlags(fs, args, getenv, stdout, 0); err != nil {
			return helpIsNoError(err)
		}
		if err := checkKeyPlan(fs, *planName, *env); err != nil {
			return err
		}
		if utf8.RuneCountInString(*name) > maxNameLen || !utf8.ValidString(*name) || strings.IndexFunc(*name, unicode.IsControl) >= 0 {
			return usagef("keys create: --name must be at most %d characters of UTF-8 without control characters", maxNameLen)
		}
		if !slices.Contains(keyScopes, *scope) {
			return usagef("keys create: --scope must be %s, got %q", orList(keyScopes), *scope)
		}
		expiresAt, err := parseExpiry(*expires, clockOf(ctx)())
		if err != nil {
			return err
		}
		spec := keySpec{Name: *name, Plan: *planName, RPM: *rpm, RPD: *rpd, Env: *env, Scope: *scope, ExpiresAt: expiresAt}
		return withStore(ctx, *db, true, func(s Store) error {
			return keysCreate(ctx, s, spec, *asJSON, stdout, stderr)
		})
	case "list":
		asJSON := fs.Bool("json", false, "print a JSON array")
		if _, err := parseFlags(fs, args, getenv, stdout, 0); err != nil {
			return helpIsNoError(err)
		}
		return withStore(ctx, *db, false, func(s Store) error { return keysList(ctx, s, *asJSON, stdout) })
	case "rotate":
		overlap := fs.Duration("overlap", 24*time.Hour, "how long the old key keeps working beside the new one, a `DURATION`")
		asJSON := fs.Bool("json", false, "print a JSON object instead of the key alone")
		pos, err := parseFlags(fs, args, getenv, stdout, 1)
		if err != nil {
			return helpIsNoError(err)
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return usagef("keys rotate: ID must be a positive integer, got %q", pos[0])
		}
		return withStore(ctx, *db, false, func(s Store) error {
			return keysRotate(ctx, s, id, *overlap, *asJSON, stdout, stderr)
		})
	case "revoke", "unban":
		pos, err := parseFlags(fs, args, getenv, stdout, 1)
		if err != nil {
			return helpIsNoError(err)
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return usagef("keys %s: ID must be a positive integer, got %q", sub, pos[0])
		}
		return withStore(ctx, *db, false, func(s Store) error {
			if sub == "revoke" {
				err = s.RevokeKey(ctx, id)
			} else {
				err = s.SetKeyBan(ctx, id, time.Time{})
			}
			if errors.Is(err, errNotFound) {
				return fmt.Errorf("keys %s: no key with id %d", sub, id)
			}
			if err == nil {
				fmt.Fprintf(stdout, "key %d %s\n", id, map[string]string{"revoke": "revoked", "unban": "unbanned"}[sub])
			}
			return err
		})
	}
	return usagef("keys: unknown subcommand %q: want %s", sub, orList(keySubcommands()))
}

// keySubcommands returns the subcommands of keys, from the command table.
func keySubcommands() []string {
	var subs []string
	for _, c := range commands {
		if sub, ok := strings.CutPrefix(c.name, "keys "); ok {
			subs = append(subs, sub)
		}
	}
	return subs
}

// withStore runs do on the migrated database at path, then closes it.
// Only with create may it start a new database (keys create does, like
// serve and migrate); list, revoke and unban fail on a mistyped path
// rather than create an empty database there.
func withStore(ctx context.Context, path string, create bool, do func(Store) error) error {
	if err := checkDBPath(path); err != nil {
		return err
	}
	if !create && !isPostgresURL(path) {
		if err := sqliteCheckDatabaseFile(path, false); err != nil {
			return err
		}
	}
	store, err := openStore(ctx, path, storeOptions{migrate: true, now: time.Now, busy: defaultBusyTimeout, maxConns: 2})
	if err != nil {
		return err
	}
	return errors.Join(do(store), store.Close())
}

// checkKeyPlan checks the flags of keys create: a known plan, and --rpm and
// --rpd with enterprise only (their bounds are flagBounds').
func checkKeyPlan(fs *flag.FlagSet, planName, env string) error {
	if planName == "" {
		return usagef("keys create: --plan is required: %s", orList(planNames()))
	}
	if _, ok := planByName(planName); !ok {
		return usagef("keys create: unknown plan %q: want %s", planName, orList(planNames()))
	}
	// Visit sees values from the environment too: Set marks them as given.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if planName == "enterprise" {
		if !given["rpm"] || !given["rpd"] {
			return usagef("keys create: --rpm and --rpd are required with --plan enterprise")
		}
	} else if given["rpm"] || given["rpd"] {
		return usagef("keys create: --rpm and --rpd are only for --plan enterprise; %s has fixed limits", planName)
	}
	return checkEnv(env)
}

// parseExpiry reads keys create --expires at now: empty (never), a
// duration from now (Go's, or whole days: 90d), a date (00:00 UTC) or an
// RFC 3339 time. A time not after now is bad usage.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	var at time.Time
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil || n <= 0 || n > 100*366 {
			return time.Time{}, usagef("keys create: --expires %q: want whole days from 1 to 36600 (90d), a duration (12h), a date (2027-01-01) or an RFC 3339 time", s)
		}
		at = now.Add(time.Duration(n) * 24 * time.Hour)
	} else if d, err := time.ParseDuration(s); err == nil {
		at = now.Add(d)
	} else if t, err := time.Parse(time.DateOnly, s); err == nil {
		at = t
	} else if t, err := time.Parse(time.RFC3339, s); err == nil {
		at = t
	} else {
		return time.Time{}, usagef("keys create: --expires %q: want a duration (90d, 12h), a date (2027-01-01) or an RFC 3339 time", s)
	}
	at = at.UTC().Truncate(time.Second)
	if !at.After(now) {
		return time.Time{}, usagef("keys create: --expires %q is %s, not in the future", s, at.Format(time.RFC3339))
	}
	return at, nil
}

// keyView is a key as the keys commands print it; Key, the secret, is
// set only by keys create.
type keyView struct {
	ID        int64      `json:"id"`
	Key       string     `json:"key,omitempty"`
	Name      string     `json:"name"`
	Plan      string     `json:"plan"`
	RPM       int64      `json:"rpm"`
	RPD       int64      `json:"rpd"`
	Env       string     `json:"env"`
	Scope     string     `json:"scope"`
	ExpiresAt *time.Time `json:"expiresAt"`
	CreatedAt time.Time  `json:"createdAt"`
}

// keyListView is a key as keys list --json prints it.
type keyListView struct {
	keyView
	Revoked       bool       `json:"revoked"`
	BannedUntil   *time.Time `json:"bannedUntil"`
	RequestsToday int64      `json:"requestsToday"` // its lineage's, as the servers last wrote them (each second)
	LastUsedAt    *time.Time `json:"lastUsedAt"`    // to the minute
	Replaces      *int64     `json:"replaces"`
}

func viewKey(k apiKey) keyView {
	rpm, rpd := planLimits(k.Plan, k.RPM, k.RPD)
	v := keyView{ID: k.ID, Name: k.Name, Plan: k.Plan, RPM: rpm, RPD: rpd, Env: k.Env, Scope: k.Scope, CreatedAt: k.CreatedAt.UTC()}
	if !k.ExpiresAt.IsZero() {
		at := k.ExpiresAt.UTC()
		v.ExpiresAt = &at
	}
	return v
}

func keysCreate(ctx context.Context, s keyStore, spec keySpec, asJSON bool, stdout, stderr io.Writer) error {
	secret := newKeySecret(spec.Env)
	spec.Hash = hashKey(secret)
	k, err := s.CreateKey(ctx, spec)
	if err != nil {
		return err
	}
	return printNewKey(k, secret, "created", asJSON, stdout, stderr)
}

// keysRotate makes the new key of id's lineage and prints it as keys
// create does; the old key expires after overlap.
func keysRotate(ctx context.Context, s keyStore, id int64, overlap time.Duration, asJSON bool, stdout, stderr io.Writer) error {
	old, err := keyByID(ctx, s, id)
	if err != nil {
		return err
	}
	secret := newKeySecret(old.Env)
	until := clockOf(ctx)().Add(overlap).UTC().Truncate(time.Second)
	k, err := s.RotateKey(ctx, id, hashKey(secret), until)
	switch {
	case errors.Is(err, errNotFound):
		return fmt.Errorf("keys rotate: no key with id %d", id)
	case errors.Is(err, errRevoked):
		return fmt.Errorf("keys rotate: key %d is revoked; create a new key instead", id)
	case err != nil:
		return err
	}
	if err := printNewKey(k, secret, fmt.Sprintf("rotated key %d into", id), asJSON, stdout, stderr); err != nil {
		return err
	}
	if !asJSON {
		ends := until
		if !old.ExpiresAt.IsZero() && old.ExpiresAt.Before(until) {
			ends = old.ExpiresAt
		}
		if ends.After(clockOf(ctx)()) {
			fmt.Fprintf(stderr, "key %d works until %s, beside the new one\n", id, ends.UTC().Format(time.RFC3339))
		} else {
			fmt.Fprintf(stderr, "key %d expired at %s; the new key takes over its lineage\n", id, ends.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// keyByID returns key id, or the error keys rotate prints for an unknown
// one.
func keyByID(ctx context.Context, s keyStore, id int64) (apiKey, error) {
	keys, err := s.KeysSince(ctx, -1)
	if err != nil {
		return apiKey{}, err
	}
	for _, k := range keys {
		if k.ID == id {
			return k, nil
		}
	}
	return apiKey{}, fmt.Errorf("keys rotate: no key with id %d", id)
}

// printNewKey prints a new key as keys create and keys rotate do: the
// secret alone on stdout and what it is on stderr, or one JSON object.
func printNewKey(k apiKey, secret, did string, asJSON bool, stdout, stderr io.Writer) error {
	v := viewKey(k)
	if asJSON {
		v.Key = secret
		return json.NewEncoder(stdout).Encode(v)
	}
	expiry := "never expires"
	if v.ExpiresAt != nil {
		expiry = "expires " + v.ExpiresAt.Format(time.RFC3339)
	}
	fmt.Fprintf(stderr, "%s key %d: %s plan, %d/min, %d/day, %s, %s scope, %s; the key is shown only this once\n",
		did, v.ID, v.Plan, v.RPM, v.RPD, v.Env, v.Scope, expiry)
	_, err := fmt.Fprintln(stdout, secret)
	return err
}

func keysList(ctx context.Context, s Store, asJSON bool, stdout io.Writer) error {
	keys, err := s.KeysSince(ctx, -1)
	if err != nil {
		return err
	}
	now := clockOf(ctx)()
	today, err := s.DayCounts(ctx, now.UTC().Format(time.DateOnly))
	if err != nil {
		return err
	}
	views := make([]keyListView, 0, len(keys))
	for _, k := range keys {
		v := keyListView{keyView: viewKey(k), Revoked: k.Revoked, RequestsToday: today[k.Lineage]}
		if !k.BannedUntil.IsZero() {
			until := k.BannedUntil.UTC()
			v.BannedUntil = &until
		}
		if !k.LastUsedAt.IsZero() {
			used := k.LastUsedAt.UTC()
			v.LastUsedAt = &used
		}
		if k.Replaces != 0 {
			v.Replaces = &k.Replaces
		}
		views = append(views, v)
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(views)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPLAN\tPER MIN\tPER DAY\tENV\tSCOPE\tCREATED\tEXPIRES\tREPLACES\tTODAY\tLAST USED\tSTATE")
	for i, k := range keys {
		state := "active"
		switch {
		case k.Revoked:
			state = "revoked"
		case !k.usableAt(now):
			state = "expired"
		case k.BannedUntil.After(now):
			state = "banned until " + k.BannedUntil.UTC().Format(time.RFC3339)
		}
		v := views[i]
		expires, replaces, used := "never", "-", "never"
		if v.ExpiresAt != nil {
			expires = v.ExpiresAt.Format(time.RFC3339)
		}
		if v.Replaces != nil {
			replaces = strconv.FormatInt(*v.Replaces, 10)
		}
		if v.LastUsedAt != nil {
			used = v.LastUsedAt.Format("2006-01-02T15:04Z")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.ID, v.Name, v.Plan, v.RPM, v.RPD, v.Env, v.Scope,
			v.CreatedAt.Format(time.RFC3339), expires, replaces, v.RequestsToday, used, state)
	}
	return tw.Flush()
}
