package redisio

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// Verifier tells a guard (guard.WithVerifier) whether a token is that of a
// current grant of one kind of disco primitive on Redis, so that a token no
// grant had cannot raise the guard's mark. It runs one read-only script,
// once per raise of the mark: t is valid if a granted hold of the name
// (a field of name/held) whose key still exists carries t, and, for a
// semaphore (scope name#slot), holds that slot. A read/write lock's readers
// share their read epoch's token, so any of them makes it valid.
//
// So a token above the name's counter, a token no hold was granted, and a
// released or expired holder's token are refused, also by a fresh guard
// with no mark. The answer is as of the script's run, on the primary it
// reached; the safety contract of package redisio (appendfsync always, no
// failover without it) applies to it as to the tokens.
//
// Every Verify ends within its context's deadline or DefaultVerifierTimeout;
// when Redis does not answer, its error does not wrap
// fencing.ErrTokenForged, so the guard rejects the request as unverified
// and keeps its mark.
//
// The caller owns cli; a Verifier never closes it.
type Verifier struct {
	cli        *redis.Client
	kind, name string
}

// DefaultVerifierTimeout bounds each Verify whose context has no deadline.
const DefaultVerifierTimeout = 5 * time.Second

// verifyScript: KEYS[1] name/held; ARGV[1] the token; ARGV[2] the slot, or
// "" for any. Returns 1 if a granted, existing hold carries the token.
var verifyScript = redis.NewScript(`
for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
  if k ~= 'n' then
    local f = redis.call('HMGET', k, 't', 'v')
    if f[1] == ARGV[1] and (ARGV[2] == '' or f[2] == ARGV[2]) then return 1 end
  end
end
return 0
`)

// NewVerifier returns a Verifier of the tokens that disco's primitives of
// kind ("lock", "rwlock", "election" or "semaphore") issue on cli's server.
// A keyed guard verifies each request's scope (the primitive's name; a
// semaphore slot's name#slot); an unkeyed guard passes none, and the
// Verifier then verifies name's tokens (name may be "" for a verifier that
// only keyed guards use).
func NewVerifier(cli *redis.Client, kind, name string) (*Verifier, error) {
	if cli == nil {
		return nil, fmt.Errorf("redisio: NewVerifier: nil client: %w", primitives.ErrInvalidArgument)
	}
	switch kind {
	case "lock", "rwlock", "election", "semaphore":
	default:
		return nil, fmt.Errorf(`redisio: NewVerifier: kind %q, want "lock", "rwlock", "election" or "semaphore": %w`, kind, primitives.ErrInvalidArgument)
	}
	if name != "" {
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("redisio: NewVerifier: %w", err)
		}
	}
	return &Verifier{cli: cli, kind: kind, name: name}, nil
}

// Verify returns nil if t is the token of a current grant of scope (name if
// scope is ""), an error wrapping fencing.ErrTokenForged if it is not, and
// any other error if Redis did not answer.
func (v *Verifier) Verify(ctx context.Context, scope string, t fencing.Token) error {
	if ctx == nil {
		return fmt.Errorf("redisio: verify: %w", driver.ContextErr(ctx))
	}
	if scope == "" {
		scope = v.name
	}
	name, slot := scope, ""
	if v.kind == "semaphore" {
		i := strings.LastIndexByte(scope, '#')
		if i < 0 {
			return fmt.Errorf("redisio: token %d: scope %q names no slot: %w", t, scope, fencing.ErrTokenForged)
		}
		if n, err := strconv.Atoi(scope[i+1:]); err != nil || n < 0 {
			return fmt.Errorf("redisio: token %d: scope %q names no slot: %w", t, scope, fencing.ErrTokenForged)
		}
		name, slot = scope[:i], scope[i+1:]
	}
	if checkName(name) != nil {
		return fmt.Errorf("redisio: token %d: no usable scope %q: %w", t, scope, fencing.ErrTokenForged)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultVerifierTimeout)
		defer cancel()
	}
	ok, err := verifyScript.Run(ctx, v.cli, []string{name + "/held"}, strconv.FormatInt(int64(t), 10), slot).Int()
	switch {
	case err != nil:
		return fmt.Errorf("redisio: verify token %d of %s %q: %w", t, v.kind, scope, err)
	case ok != 1:
		return fmt.Errorf("redisio: token %d of %s %q: no current grant has it: %w", t, v.kind, scope, fencing.ErrTokenForged)
	}
	return nil
}
