// clock.go owns the clock that serve reads: the real one, or a test's,
// carried in through run's context.

package main

import (
	"context"
	"time"
)

// clockKey carries a test's clock into serve, through run's context: the
// time that idempotent answers are stored and expire by, that the keyring
// and the request log read, and that the key commands stamp. main never
// sets one.
type clockKey struct{}

// clockOf is the clock ctx carries, or time.Now.
func clockOf(ctx context.Context) func() time.Time {
	if now, ok := ctx.Value(clockKey{}).(func() time.Time); ok {
		return now
	}
	return time.Now
}
