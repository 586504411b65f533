package fencetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// Resource is what the kit knows of the resource under test: how to send it
// one request, and what it declares about itself. Write and Read are
// required; everything else is optional.
type Resource struct {
	// Write sends one write to the resource: Request.Value, carried with
	// Request.Token (and Request.TokenScope). It returns nil if and only if
	// the resource applied the write. An error wrapping
	// fencing.ErrTokenStale, fencing.ErrNoToken, fencing.ErrWrongScope,
	// fencing.ErrTokenForged, guard.ErrUnverified, guard.ErrStore or
	// ErrRefused says that it did not; any other error says the kit cannot
	// tell (a broken connection), and the kit then allows either. A stale
	// token must be refused with an error wrapping fencing.ErrTokenStale
	// (HTTP 409, gRPC FailedPrecondition through the adapters), so that a
	// zombie learns that its grant is over. An error wrapping
	// errors.ErrUnsupported says the resource cannot be sent this request
	// at all (a check function cannot be sent a malformed token): the kit
	// then leaves the case out, and logs it.
	Write func(ctx context.Context, req Request) error

	// Read returns the value of the last write the resource applied in
	// req.Scope, or "" if none. req carries the token of the latest write
	// the kit saw accepted there (none before the first), so that a
	// resource that fences its reads too admits it without a raise; a read
	// must change nothing.
	Read func(ctx context.Context, req Request) (string, error)

	// Restart stops the resource and starts it again, as a crash and a
	// restart of its process would: what it keeps in memory is gone, what
	// it keeps durably (its data, its marks) stays. Nothing else runs
	// during a Restart. nil declares that the resource keeps nothing across
	// a restart (its data dies with it); StaleWriteAfterRestart is then
	// skipped.
	Restart func(ctx context.Context) error

	// Replica, if not nil, is a second replica of the same resource: its
	// own process (its own guard), the same data and the same durable
	// marks. The Replicas history writes and reads through both. Its own
	// Replica, Restart and declarations are not used.
	Replica *Resource

	// Keyed declares that the resource keeps one mark per scope
	// (guard.Keyed): the kit sends each request's scope (Request.Scope,
	// which the adapter names in the request, and Request.TokenScope beside
	// the token), gives each history scopes of its own, and runs
	// OtherScope and IndependentScopes. Without it Request.Scope and
	// Request.TokenScope are always "".
	Keyed bool

	// ScopePrefix is put before the scope names the kit makes up on a Keyed
	// resource, so that they are names the resource serves: with
	// "/locks/orders/", a scope is "/locks/orders/fencetest-1a2b3c-StaleWrite-a"
	// (what follows the prefix is one path segment: letters, digits and
	// dashes). "" means "/fencetest/".
	ScopePrefix string

	// Verifies declares that the resource asks the coordination service
	// whether a token above its mark is that of a current grant (a guard
	// with a guard.Verifier), so that ForgedToken must see a forged token
	// refused. It needs Grant: a verifying resource refuses made-up tokens.
	Verifies bool

	// Grant, if not nil, issues the tokens the kit writes with: each call
	// returns the token of a new grant of scope ("" on an unkeyed
	// resource), greater than every token it returned before, and keeps
	// that grant current until the next call for the same scope (or the
	// end of the test). Use it with a real lock (for example memio.NewLock)
	// when the resource verifies tokens. nil: the kit makes tokens up,
	// counting from 1.
	Grant func(ctx context.Context, scope string) (fencing.Token, error)
}

// Request is one request the kit sends to the resource.
type Request struct {
	// Scope is the scope the request is for, which the adapter names in the
	// request (its path, its message): "" on a resource that is not Keyed.
	Scope string
	// Token is the token as it travels on the wire: t.String() for a
	// token t, "" for none. The kit also sends malformed ones ("007",
	// "-7", "0", "7x") in the NoToken history.
	Token string
	// TokenScope is the scope sent beside the token (fencing.ScopeHTTPHeader,
	// fencing.ScopeGRPCMetadataKey): "" for none. It is Scope, except where
	// the kit sends a token of another scope, or none.
	TokenScope string
	// Value is what a write stores; empty on a read. Every write of a run
	// has its own value, which says who wrote it.
	Value string
}

// ParsedToken returns the token that a resource taking parsed tokens (a
// function's argument, a SQL parameter) is given for r: 0 for a request
// without a token, the number for a token, zero or a negative token. Any
// other form cannot be given to such a resource, as the transport
// (fencing.ParseToken) refuses it first: the error wraps
// errors.ErrUnsupported, which a Resource's Write may return as is.
func (r Request) ParsedToken() (fencing.Token, error) {
	s := r.Token
	switch {
	case s == "" || s == "0":
		return 0, nil
	case strings.HasPrefix(s, "-"):
		if t, err := fencing.ParseToken(s[1:]); err == nil {
			return -t, nil
		}
	default:
		if t, err := fencing.ParseToken(s); err == nil {
			return t, nil
		}
	}
	return 0, fmt.Errorf("fencetest: %q is no token a parsed token can stand for (the transport refuses it before any check runs): %w", s, errors.ErrUnsupported)
}

// ErrRefused is wrapped by the errors of an adapter's Write when the
// resource answered that it did not apply the write, for a reason the
// adapter cannot name more closely (an HTTP status other than 2xx, 409,
// 403, 400 and 428, and other than 500, 502 and 504, which leave the
// outcome open; a gRPC code other than FailedPrecondition, PermissionDenied
// and InvalidArgument, and other than Unavailable, Canceled,
// DeadlineExceeded, Unknown and Internal, which leave it open).
var ErrRefused = errors.New("fencetest: the resource refused the write")

// historyTimeout bounds each history: every request it makes, and the
// resource's restart.
const historyTimeout = 2 * time.Minute

// runner is what Run needs of a test: *testing.T, and the recorder the
// kit's own tests use to see its failures.
type runner[T any] interface {
	testing.TB
	Run(name string, f func(T)) bool
}

// history is one of the histories Run replays.
type history struct {
	name string
	run  func(t testing.TB, k *kit)
}

// histories are Run's subtests, in order: NoToken first, where an unkeyed
// resource is still fresh; ForgedToken last, as it may brick an unkeyed
// resource that does not verify tokens.
var histories = []history{
	{"NoToken", noToken},
	{"StaleWrite", staleWrite},
	{"EqualTokens", equalTokens},
	{"OtherScope", otherScope},
	{"IndependentScopes", independentScopes},
	{"StaleWriteAfterRestart", staleWriteAfterRestart},
	{"Replicas", replicas},
	{"ManyOwners", manyOwners},
	{"ForgedToken", forgedToken},
}

// Run replays every history on r, each as a subtest named after it, one
// after another (see the package documentation). r must be fresh (it has
// seen no token) unless r.Grant issues the tokens. Run fails t at once if r
// lacks Write or Read, or declares Verifies without Grant.
func Run(t *testing.T, r Resource) {
	t.Helper()
	run(t, r)
}

func run[T runner[T]](t T, r Resource) {
	t.Helper()
	if err := r.check(); err != nil {
		t.Fatalf("fencetest: %v", err)
	}
	k := &kit{r: r, id: fmt.Sprintf("%06x", rand.Uint32()>>8)}
	for _, h := range histories {
		t.Run(h.name, func(t T) { h.run(t, k) })
	}
}

func (r Resource) check() error {
	var missing []string
	if r.Write == nil {
		missing = append(missing, "Write")
	}
	if r.Read == nil {
		missing = append(missing, "Read")
	}
	if r.Replica != nil && (r.Replica.Write == nil || r.Replica.Read == nil) {
		missing = append(missing, "Replica's Write or Read")
	}
	if len(missing) > 0 {
		return fmt.Errorf("the Resource lacks %s", strings.Join(missing, ", "))
	}
	if r.Verifies && r.Grant == nil {
		return errors.New("the Resource Verifies tokens but has no Grant: a verifying resource refuses the tokens the kit would make up")
	}
	return nil
}

// kit is one Run: the resource and the tokens issued so far.
type kit struct {
	r  Resource
	id string // this run's part of scope names

	mu      sync.Mutex
	last    fencing.Token // the last token the kit made up (Grant nil)
	touched bool          // a token was sent (the unkeyed resource is not fresh)
}

// grant returns a new token of scope, above every token issued before; it
// fails the history if Resource.Grant fails.
func (k *kit) grant(ctx context.Context, t testing.TB, scope string) fencing.Token {
	t.Helper()
	tok, err := k.tryGrant(ctx, scope)
	if err != nil {
		t.Fatalf("%s: %v", historyName(t), err)
	}
	return tok
}

// tryGrant returns a new token of scope: the kit's next one, or
// Resource.Grant's.
func (k *kit) tryGrant(ctx context.Context, scope string) (fencing.Token, error) {
	if k.r.Grant == nil {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.last++
		return k.last, nil
	}
	tok, err := k.r.Grant(ctx, scope)
	if err != nil {
		return 0, fmt.Errorf("Resource.Grant(%q): %w", scope, err)
	}
	if tok <= 0 {
		return 0, fmt.Errorf("Resource.Grant(%q) returned %d, not a token", scope, tok)
	}
	return tok, nil
}

// skipAbove makes the kit's own tokens continue above t (after a forged
// token was accepted, so that later writes are not all stale).
func (k *kit) skipAbove(t fencing.Token) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last = max(k.last, t)
}

// fresh reports whether no token has been sent to the (unkeyed) resource
// yet, and marks it touched.
func (k *kit) fresh() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	f := !k.touched
	k.touched = true
	return f
}

// scope returns the scope name of part of the current history: "" on an
// unkeyed resource.
func (k *kit) scope(t testing.TB, part string) string {
	if !k.r.Keyed {
		return ""
	}
	return cmp.Or(k.r.ScopePrefix, "/fencetest/") + "fencetest-" + k.id + "-" + historyName(t) + "-" + part
}

// historyContext returns the context of one history.
func historyContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), historyTimeout)
	t.Cleanup(cancel)
	return ctx
}

// outcome is what a write's error says about it.
type outcome int

const (
	applied outcome = iota
	stale           // refused as stale: not applied
	refused         // refused for another reason: not applied
	unknown         // the kit cannot tell
	unsent          // the resource cannot be sent this request
)

// notApplied are the errors that say a write was certainly not applied.
var notApplied = []error{
	fencing.ErrNoToken, fencing.ErrWrongScope, fencing.ErrTokenForged,
	guard.ErrUnverified, guard.ErrStore, ErrRefused,
}

func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return applied
	case errors.Is(err, errors.ErrUnsupported):
		return unsent
	case errors.Is(err, fencing.ErrTokenStale):
		return stale
	}
	for _, e := range notApplied {
		if errors.Is(err, e) {
			return refused
		}
	}
	return unknown
}
