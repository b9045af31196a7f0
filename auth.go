// auth.go owns identity: the key format, hashing (only a key's SHA-256 is
// stored or compared), the in-memory keyring of usable keys, the
// authenticate step that resolves a request's key once, and requireKey.

package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Key format: an environment prefix and keySecretLen random base62 characters.
const (
	keySecretLen   = 40 // about 238 bits
	keyMinSecret   = 32
	keyMaxLen      = 128
	base62Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

var environments = []string{"production", "staging"}

// keyPrefix returns the prefix of keys for env.
func keyPrefix(env string) string {
	if env == "staging" {
		return "ps_test_"
	}
	return "ps_live_"
}

// newKeySecret returns a fresh key for env.
func newKeySecret(env string) string {
	b := make([]byte, 0, len("ps_live_")+keySecretLen)
	b = append(b, keyPrefix(env)...)
	var buf [64]byte
	for len(b) < cap(b) {
		rand.Read(buf[:])
		for _, c := range buf {
			// 248 = 4*62: rejecting larger bytes keeps every character equally likely.
			if c < 248 && len(b) < cap(b) {
				b = append(b, base62Alphabet[c%62])
			}
		}
	}
	return string(b)
}

// hashKey is the only form in which a key is stored or compared.
func hashKey(key string) [32]byte {
	var buf [64]byte // []byte(key) would allocate: keys are longer than its 32-byte stack buffer
	return sha256.Sum256(append(buf[:0], key...))
}

// validKeyFormat reports whether key has the shape of a key for env.
func validKeyFormat(key, env string) bool {
	p := keyPrefix(env)
	if len(key) > keyMaxLen || len(key) < len(p)+keyMinSecret || key[:len(p)] != p {
		return false
	}
	for i := len(p); i < len(key); i++ {
		if strings.IndexByte(base62Alphabet, key[i]) < 0 {
			return false
		}
	}
	return true
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header value; the scheme is case-insensitive, the token is taken as is.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// keyring is the server's in-memory view of the usable keys of its
// environment, by hash. refresh picks up what the keys commands change and
// hands every key whose ban changed (a new key: whose ban is set) to
// onChange.
type keyring struct {
	store    keyStore
	env      string
	onChange func(*apiKey)
	now      func() time.Time // when a key's expiry is checked

	mu     sync.RWMutex
	byHash map[[32]byte]*apiKey
	byID   map[int64]*apiKey
	seq    int64
}

func newKeyring(store keyStore, env string, now func() time.Time, onChange func(*apiKey)) *keyring {
	return &keyring{store: store, env: env, now: now, onChange: onChange,
		byHash: map[[32]byte]*apiKey{}, byID: map[int64]*apiKey{}, seq: -1}
}

// refresh loads the keys changed since the last refresh.
func (kr *keyring) refresh(ctx context.Context) error {
	kr.mu.RLock()
	seq := kr.seq
	kr.mu.RUnlock()
	changed, err := kr.store.KeysSince(ctx, seq)
	if err != nil || len(changed) == 0 {
		return err
	}
	kr.mu.Lock()
	defer kr.mu.Unlock()
	for i := range changed {
		k := &changed[i]
		kr.seq = max(kr.seq, k.seq)
		k.used = new(atomic.Bool)
		var banned time.Time // as this keyring knew the key: zero for a key new to it
		if old, ok := kr.byID[k.ID]; ok {
			delete(kr.byHash, old.Hash)
			delete(kr.byID, k.ID)
			k.used = old.used // a use not written yet stays to be written
			banned = old.BannedUntil
		}
		if k.Revoked || k.Env != kr.env {
			continue
		}
		k.RPM, k.RPD = planLimits(k.Plan, k.RPM, k.RPD)
		kr.byHash[k.Hash] = k
		kr.byID[k.ID] = k
		// Only a ban that changed goes to the limiter. A row that changed
		// for another reason (a rotation shortened its life, or made it,
		// without a ban the limiter imposed a moment ago and the upkeep
		// has yet to write) must not lift the lineage's ban.
		if kr.onChange != nil && !k.BannedUntil.Equal(banned) {
			kr.onChange(k)
		}
	}
	return nil
}

// watch refreshes the keyring every interval until ctx ends.
func (kr *keyring) watch(ctx context.Context, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := kr.refresh(ctx); err != nil && ctx.Err() == nil {
				log.Error("refresh keys", "err", err)
			}
		}
	}
}

// takeUsed appends the ids of the keys used since the last take to dst.
func (kr *keyring) takeUsed(dst []int64) []int64 {
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	for id, k := range kr.byID {
		if k.used.Load() && k.used.Swap(false) {
			dst = append(dst, id)
		}
	}
	return dst
}

// returnUsed marks the keys of ids used again, for a write that failed.
func (kr *keyring) returnUsed(ids []int64) {
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	for _, id := range ids {
		if k := kr.byID[id]; k != nil {
			k.used.Store(true)
		}
	}
}

// keyOf returns the usable key that r's Authorization header carries, or
// nil, and whether it carried one that has expired.
func (kr *keyring) keyOf(r *http.Request) (k *apiKey, expired bool) {
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		return nil, false
	}
	return kr.lookup(token)
}

// lookup returns the usable key whose secret is key, or nil, and whether
// key is one that has expired. Expiry is checked here, on the clock, not
// when the keyring refreshes: a key stops working at its very second.
func (kr *keyring) lookup(key string) (k *apiKey, expired bool) {
	if !validKeyFormat(key, kr.env) {
		return nil, false
	}
	h := hashKey(key)
	kr.mu.RLock()
	k = kr.byHash[h]
	kr.mu.RUnlock()
	if k != nil && !k.ExpiresAt.IsZero() && !k.usableAt(kr.now()) {
		return nil, true
	}
	if k != nil && !k.used.Load() { // a load, not a store, on the usual path
		k.used.Store(true)
	}
	return k, false
}

var (
	errUnauthorized = errorf("unauthorized", "a valid API key is required: send Authorization: Bearer <key>")
	errKeyExpired   = errorf("unauthorized", "this API key has expired: ask for a new one, and send it as Authorization: Bearer <key>")
	errReadOnly     = errorf("forbidden", "this API key is read-only (scope read): it may GET and HEAD, not create")
)

// authenticate resolves the key of every request under /v1/, once, and
// hands it on in the request's state, where the limiter, requireKey and
// the log read it (and any handler that comes to need it). It refuses
// nothing: a request without a usable key is limited by its address, then
// refused by requireKey.
func authenticate(keys *keyring) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if isAPIPath(r.URL.Path) {
				if k, expired := keys.keyOf(r); k != nil || expired {
					st := stateOf(r)
					if st == nil { // no log layer made one
						st = &reqState{}
						r = withState(r, st)
					}
					st.key, st.expired = k, expired
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// isAPIPath reports whether p is under /v1, where requests are
// authenticated and limited.
func isAPIPath(p string) bool {
	return p == "/v1" || strings.HasPrefix(p, "/v1/")
}

// requireKey lets a request through to next only when authenticate found a
// usable key in it: a request without a state, or whose state has no key,
// is a 401, whatever wraps the ResponseWriter. Every failure gets the same
// answer, so that it reveals nothing about which keys exist.
func requireKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateOf(r)
		if st == nil || st.key == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="petstore"`)
			err := errUnauthorized
			if st != nil && st.expired {
				// Said only to whoever holds the key: it names no key.
				err = errKeyExpired
			}
			writeError(w, r, err)
			return
		}
		st.served = true
		next.ServeHTTP(w, r)
	})
}

// requireWrite is requireKey for the operations that write: a read key's
// request is 403. The limiter has counted it already, and its headers
// stay on the answer.
func requireWrite(next http.Handler) http.Handler {
	return requireKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stateOf(r).key.Scope == scopeRead {
			writeError(w, r, errReadOnly)
			return
		}
		next.ServeHTTP(w, r)
	}))
}
