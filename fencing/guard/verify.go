package guard

import (
	"context"
	"errors"

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

// ErrUnverified is wrapped (with the verifier's own error) by the errors of
// a guard whose verifier could not tell whether a token above the mark is
// that of a current grant: the request was not admitted and the mark was
// not raised. HTTP middleware answers 503, gRPC interceptors Unavailable,
// and metrics count it with reason "unverified"; the client may retry.
var ErrUnverified = errors.New("guard: token could not be verified")
