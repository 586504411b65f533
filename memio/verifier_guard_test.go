package memio_test

import (
	"context"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard/verifiertest"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives/lock"
)

// memHold returns a Backend.Hold that locks name on st with a lock of its
// own.
func memHold(t *testing.T, st *memio.Store, name string) func(context.Context) (fencing.Token, func(context.Context) error, error) {
	return verifiertest.LockHold(t, func() (lock.Service, error) { return memio.NewLock(st, name) })
}

// TestVerifierGuard: guards built with memio's verifier, keyed and plain,
// refuse tokens of no current grant. (memio's store cannot be down.)
func TestVerifierGuard(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		st := memio.NewStore()
		const name = "/orders/42"
		scope, vname := name, ""
		if !keyed {
			scope, vname = "", name
		}
		v, err := memio.NewVerifier(st, "lock", vname)
		if err != nil {
			t.Fatal(err)
		}
		verifiertest.Run(t, verifiertest.Backend{
			Verifier: v,
			Scope:    scope,
			Hold:     memHold(t, st, name),
			Forged: func(ctx context.Context) fencing.Token {
				// Another lock's token: below the store's revision, and no
				// holder of name ever had it.
				tok, _, err := memHold(t, st, "/orders/43")(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return tok
			},
		})
	}
}
