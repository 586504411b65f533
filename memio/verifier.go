package memio

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives/driver"
)

// Verifier tells a guard (guard.WithVerifier) whether a token is that of a
// current grant on a Store: a lock's holder, a read/write lock's writer or
// readers, an election's leader, or a semaphore slot's holder (the scope
// name#slot). Unlike a real store's, its answer is exact and immediate: a
// token is valid exactly while its grant lasts.
type Verifier struct {
	st         *Store
	kind, name string
}

// NewVerifier returns a Verifier of the tokens that st's primitives of
// kind ("lock", "rwlock", "election" or "semaphore") issue. A keyed guard
// verifies each request's scope (the primitive's name; a semaphore slot's
// name#slot); an unkeyed guard passes none, and the Verifier then verifies
// name's tokens (name may be "" for a verifier only keyed guards use).
func NewVerifier(st *Store, kind, name string) (*Verifier, error) {
	if st == nil {
		return nil, fmt.Errorf("memio: NewVerifier: nil Store: %w", ErrInvalidArgument)
	}
	switch kind {
	case kindLock, kindRWLock, kindElection, kindSemaphore:
	default:
		return nil, fmt.Errorf(`memio: NewVerifier: kind %q, want "lock", "rwlock", "election" or "semaphore": %w`, kind, ErrInvalidArgument)
	}
	return &Verifier{st: st, kind: kind, name: name}, nil
}

// Verify returns nil if t is the token of a current grant of scope (name
// if scope is ""), else an error wrapping fencing.ErrTokenForged.
func (v *Verifier) Verify(ctx context.Context, scope string, t fencing.Token) error {
	if ctx == nil {
		return fmt.Errorf("memio: verify: %w", driver.ContextErr(ctx))
	}
	if scope == "" {
		scope = v.name
	}
	if v.current(scope, int64(t)) {
		return nil
	}
	return fmt.Errorf("memio: token %d of %s %q: no current grant has it: %w", t, v.kind, scope, fencing.ErrTokenForged)
}

// current reports whether a granted key of scope holds token t.
func (v *Verifier) current(scope string, t int64) bool {
	name, slot := scope, -1
	if v.kind == kindSemaphore {
		i := strings.LastIndexByte(scope, '#')
		if i < 0 {
			return false
		}
		n, err := strconv.Atoi(scope[i+1:])
		if err != nil || n < 0 {
			return false
		}
		name, slot = scope[:i], n
	}
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	q, ok := v.st.queues[v.kind+"\x00"+name]
	if !ok {
		return false
	}
	for _, k := range q.keys {
		if k.held && k.token == t && (slot < 0 || k.slot == slot) {
			return true
		}
	}
	return false
}
