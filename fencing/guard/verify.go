package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/ahrtr/disco/fencing"
)

// Verifier asks the coordination service whether a token is that of a
// current grant, so that one request with a token far above any real grant
// (a client bug, a corrupted header, a hostile caller) cannot raise a
// guard's mark for good and lock every legitimate owner out. A guard built
// WithVerifier asks it once per raise of a scope's mark, before it raises
// (in memory or in its store), and never for a token at or below the mark:
// steady traffic at the mark costs nothing.
//
// Each backend offers one (etcdio, zkio, redisio, memio: NewVerifier).
type Verifier interface {
	// Verify returns nil if t is the token of a current grant of scope (the
	// primitive's name; "" for an unkeyed Guard, whose verifier knows its
	// name); an error wrapping fencing.ErrTokenForged if the service never
	// issued t for scope or that grant is over; any other error if it
	// cannot tell (the service is down or did not answer before ctx ended).
	Verify(ctx context.Context, scope string, t fencing.Token) error
}

// ErrUnverified is wrapped (with the verifier's own error, or the value of
// a call that panicked) by the errors of a guard whose verifier could not
// tell whether a token above the mark is that of a current grant: the
// request was not admitted and the mark was not raised. HTTP middleware answers 503, gRPC interceptors Unavailable,
// and metrics count it with reason "unverified"; the client may retry.
var ErrUnverified = errors.New("guard: token could not be verified")

// verify asks the verifier whether t is the token of a current grant of
// scope, sharing the call with concurrent requests of the same token, and
// its success with the requests of t that come before the mark reaches t. It
// returns nil if it is, an error wrapping fencing.ErrTokenForged if it is
// not, and one wrapping ErrUnverified if the verifier could not tell or did
// not answer before ctx ended or the store timeout passed.
func (c *config) verify(ctx context.Context, s *state, scope string, t fencing.Token) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	cl, err := s.await(ctx, func() *call {
		// A call every request gave up on is not joined: its answer, even
		// a success that came after, is not trusted.
		if cl := s.verifying[t]; cl != nil && !cl.abandoned {
			return cl
		}
		cl := newCall(ctx)
		if s.verifying == nil {
			s.verifying = make(map[fencing.Token]*call)
		}
		for old := range s.verifying {
			if int64(old) <= s.mark.Load() {
				delete(s.verifying, old) // the mark passed it: never asked again
			}
		}
		s.verifying[t] = cl
		c.start(s, cl, func(ctx context.Context) (fencing.Token, error) {
			err := c.verifier.Verify(ctx, scope, t)
			if err == nil || errors.Is(err, fencing.ErrTokenForged) {
				c.answered(verifierOutage)
			}
			return 0, err
		}, func() {
			// A failure, or any answer to an abandoned call, is forgotten
			// at once (the next request asks again); a success stays until
			// the mark reaches t, so that a request of t arriving while
			// t's raise is under way does not ask again, or until a
			// request of t fails after it (see forgetVerified).
			if (cl.err != nil || cl.abandoned) && s.verifying[t] == cl {
				delete(s.verifying, t)
			}
		})
		return cl
	})
	if err == nil {
		err = cl.err
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fencing.ErrTokenForged):
		return fmt.Errorf("guard: token %d%s not accepted: %w", t, scopeNote(scope), err)
	default:
		return fmt.Errorf("guard: token %d%s not accepted: %w: %w", t, scopeNote(scope), ErrUnverified, err)
	}
}

// forgetVerified forgets a success of the verifier for t kept for t's
// raise, unless the mark has reached t: a request of t failed after it
// (its raise in the store, say), and the grant may be over by the next
// request of t, which asks again.
func (s *state) forgetVerified(t fencing.Token) {
	if int64(t) <= s.mark.Load() {
		return
	}
	s.callMu.Lock()
	defer s.callMu.Unlock()
	if cl := s.verifying[t]; cl != nil {
		select {
		case <-cl.done:
			delete(s.verifying, t)
		default: // still asking: its waiters take its answer
		}
	}
}
