// Package fencing defines fencing tokens and carries them over HTTP and gRPC.
//
//	fencing.InjectHTTP(req, g.Token())               // a client stamps a request
//	t, err := fencing.FromHTTP(req)                   // a resource reads it
//	ctx = fencing.NewOutgoingContext(ctx, g.Token())  // the same as gRPC metadata
//	client := &http.Client{Transport: fencing.NewTransport(nil, source)} // stamps every request
//
// # The three-party contract
//
// A fencing token protects a resource (a database, a storage service, any
// server that accepts writes) against a client that believes it still holds a
// lock or a leadership that it has in fact lost, for example because it was
// paused by a garbage collector or cut off by a network partition. Safety
// rests on three parties, each keeping one promise:
//
//  1. The coordination service (disco's primitives, on etcd, ZooKeeper,
//     Redis or in memory) issues tokens that strictly increase with
//     every new grant: a grant that starts after another one ended carries a
//     greater token. Readers of an rwlock that hold it together share one
//     token.
//  2. The client carries the token of its current grant on every request it
//     sends to the resource: [InjectHTTP], [NewOutgoingContext], or, so that
//     no request is ever forgotten, [NewTransport], [UnaryClientInterceptor]
//     and [StreamClientInterceptor], which refuse to send a request at all
//     while the client holds no grant.
//  3. The resource checks every request against the highest token it has
//     seen (its high-water mark) and rejects the ones below it with an error
//     wrapping [ErrTokenStale]. Package [github.com/ahrtr/disco/fencing/guard]
//     does this, as a plain check, as an admission with a critical section,
//     as HTTP middleware and as gRPC interceptors.
//
// Once the resource has seen token T, no request carrying a token below T is
// accepted again, so a zombie holder of an old grant cannot overwrite the work
// of a newer holder. The guarantee holds only as long as the resource keeps
// its mark; see the guard package on persisting it.
//
// # Wire format
//
// A token travels as a decimal number in canonical form: ASCII digits only,
// no sign, no whitespace, no leading zeros, greater than zero and at most
// math.MaxInt64. Over HTTP it is the single value of the [HTTPHeader] header;
// over gRPC it is the single value of the [GRPCMetadataKey] metadata key.
// Parsing is strict and never guesses: a value that is not canonical, or a
// header or metadata key that carries several values, is rejected.
//
// A token may carry its scope, the name of the lock it was issued for, in
// [ScopeHTTPHeader] or [ScopeGRPCMetadataKey] beside it (see [EncodeScope]);
// a resource that follows many locks (guard.Keyed) needs it, a plain guard
// ignores it. [NewScopedTransport], [ScopedUnaryClientInterceptor] and
// [ScopedStreamClientInterceptor] stamp both from a [ScopedTokenSource].
//
// # Errors
//
// Every error about a token that is absent or unusable wraps [ErrNoToken].
// Errors about a token that is present but unusable (malformed, zero,
// out of range, several values) also wrap [ErrMalformedToken], so a server
// can tell "missing" (errors.Is(err, ErrNoToken) but not ErrMalformedToken)
// from "malformed" (errors.Is(err, ErrMalformedToken)); the guard answers
// HTTP 428 for the first and 400 for the second.
//
// A nil context.Context is a bug of the caller's, and never a panic.
// [FromIncomingContext] and [ScopeFromIncomingContext] find no token (or
// scope) in it: an error that says "nil context" and wraps ErrNoToken
// (ErrNoScope), never ErrMalformedToken. [NewOutgoingContext] and
// [NewScopedOutgoingContext], which return no error, take it for
// context.Background(), which has no deadline and never ends either.
package fencing

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Token is a fencing token: a number issued by the coordination service with
// each grant, strictly greater than the token of every earlier grant. The
// zero Token means "no token"; valid tokens are greater than zero.
type Token int64

// String returns t in decimal, the form in which it travels on the wire. For
// every valid token t, ParseToken(t.String()) returns t.
func (t Token) String() string {
	return strconv.FormatInt(int64(t), 10)
}

const (
	// HTTPHeader is the HTTP header that carries a token in decimal.
	HTTPHeader = "Fencing-Token"
	// GRPCMetadataKey is the gRPC metadata key that carries a token in decimal.
	GRPCMetadataKey = "fencing-token"
)

var (
	// ErrTokenStale means a token is below the high-water mark of the
	// resource that checked it: a newer grant has been seen since, and the
	// request must not be applied.
	ErrTokenStale = errors.New("fencing: stale token")

	// ErrNoToken means a request carries no usable token: it is missing,
	// malformed, zero or negative. Every such error wraps it.
	ErrNoToken = errors.New("fencing: no token")

	// ErrMalformedToken means a token is present but unusable: not a
	// canonical decimal number, zero, out of range, or given several times.
	// It wraps ErrNoToken, so errors.Is(err, ErrNoToken) holds for malformed
	// tokens too; errors.Is(err, ErrMalformedToken) holds only for them.
	ErrMalformedToken = fmt.Errorf("fencing: malformed token: %w", ErrNoToken)

	// ErrTokenForged means the coordination service says a token is not
	// that of a current grant of its scope: it never issued it, or the
	// grant it was issued for is over. A verifier (guard.Verifier) judges
	// it, and only for a token above the mark; the request must not be
	// applied and the mark stays where it was.
	ErrTokenForged = errors.New("fencing: token of no current grant")
)

// malformedError describes one malformed token. It wraps ErrMalformedToken
// (and through it ErrNoToken) and reads, for example,
// `fencing: malformed token "12a": not a decimal number: fencing: no token`.
type malformedError struct {
	input  string
	reason string
}

func (e *malformedError) Error() string {
	return fmt.Sprintf("fencing: malformed token %q: %s: %v", e.input, e.reason, ErrNoToken)
}

func (e *malformedError) Unwrap() error { return ErrMalformedToken }

// maxQuoted bounds how much of a bad input an error message repeats, so that
// a huge header does not turn into a huge error (or response body).
const maxQuoted = 32

func malformed(input, reason string) error {
	return &malformedError{input: clip(input), reason: reason}
}

// clip returns s, or its first maxQuoted bytes or a few fewer, cut between
// runes (a rune cut in two would show as escaped bytes), followed by "...".
func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > maxQuoted-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut-- // at most UTFMax-1 bytes back in valid UTF-8; not valid: cut anywhere
	}
	return s[:cut] + "..."
}

// missing reports a token that is absent; where says where it was looked for.
func missing(where string) error {
	return fmt.Errorf("fencing: missing %s: %w", where, ErrNoToken)
}

// ParseToken parses a token in canonical decimal form: one or more ASCII
// digits, no sign, no whitespace, no leading zero, greater than zero and at
// most math.MaxInt64. Anything else is rejected, never guessed at: "007",
// "+7", " 7", "7 " and "0" are all errors. Every error wraps
// ErrMalformedToken (and so ErrNoToken) and says what was wrong.
func ParseToken(s string) (Token, error) {
	if s == "" {
		return 0, malformed(s, "empty")
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, malformed(s, badByteReason(s, c))
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			// Keep scanning so that "99999999999999999999x" is reported as
			// not a number rather than out of range.
			for j := i + 1; j < len(s); j++ {
				if s[j] < '0' || s[j] > '9' {
					return 0, malformed(s, badByteReason(s, s[j]))
				}
			}
			return 0, malformed(s, "out of range (above 9223372036854775807)")
		}
		n = n*10 + d
	}
	if n == 0 {
		return 0, malformed(s, "zero is not a token")
	}
	if s[0] == '0' {
		return 0, malformed(s, "leading zero (not canonical)")
	}
	return Token(n), nil
}

// badByteReason explains why byte c makes s not a token.
func badByteReason(s string, c byte) string {
	switch {
	case c == '+' || c == '-':
		if s[0] == c {
			return "sign not allowed"
		}
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
		return "whitespace not allowed"
	case c == ',':
		return "several values"
	}
	return "not a decimal number"
}
