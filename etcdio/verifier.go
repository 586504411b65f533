package etcdio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/primitives/driver"
)

// Verifier tells a guard (guard.WithVerifier) whether a token is that of a
// current grant of one kind of disco primitive on etcd, so that a token no
// grant had cannot raise the guard's mark. It reads etcd, once per raise of
// the mark; the rules, for a token t of the primitive on prefix p:
//
//   - every kind: t is not above the cluster's revision;
//   - "lock": the key that held p at revision t (the owner's key directly
//     under p/ with the lowest CreateRevision, read at revision t; keys
//     without a lease and nested names' keys are not owners') is there
//     now, with the same CreateRevision. If etcd has compacted revision t,
//     a token is forged if the holder now was created after t, and
//     otherwise unverified (the present cannot tell who held at t): a
//     guard refuses it and keeps its mark, so a fresh guard (no store, or
//     a scope it has not seen) refuses a long-held lock's holder whose
//     token etcd has compacted, until the lock changes hands;
//   - "election": the leader now (the owner's key with the lowest
//     CreateRevision under p/) was
//     created at t, a term's token;
//   - "rwlock": t is the revision at which the epoch key (p + EpochSuffix)
//     was last written, and the head of the queue now (the owner's key of
//     p/read/ or p/write/ with the lowest CreateRevision) is of the epoch's
//     kind (a writer created before t for a write epoch, a reader for a
//     read epoch);
//   - "semaphore" (scope p#i, semaphore.Scope): slot i's claim key
//     (p/slot/<i>) was last written at t, the claim of its present holder.
//
// So a released or superseded holder's token is refused, also by a fresh
// guard with no mark. What a token within the present lock holder's tenure
// costs: a lock's token is a revision read during its grant, so any t from
// that grant to now passes; at worst it raises the mark above the holder's
// own token, and the holder is refused until the lock changes hands.
//
// Every Verify ends within its context's deadline or the verifier's
// timeout (DefaultVerifierTimeout, or WithVerifierTimeout); when etcd does
// not answer, its error does not wrap fencing.ErrTokenForged, so the guard
// rejects the request as unverified and keeps its mark.
//
// The caller owns cli; a Verifier never closes it.
type Verifier struct {
	cli     *clientv3.Client
	kind    string
	name    string
	timeout time.Duration
}

// DefaultVerifierTimeout bounds each Verify whose context has no deadline,
// unless WithVerifierTimeout says otherwise.
const DefaultVerifierTimeout = 5 * time.Second

// VerifierOption configures NewVerifier.
type VerifierOption func(*Verifier)

// WithVerifierTimeout bounds each Verify whose context has no deadline by d
// instead of DefaultVerifierTimeout (d <= 0 means the default).
func WithVerifierTimeout(d time.Duration) VerifierOption {
	return func(v *Verifier) {
		if d > 0 {
			v.timeout = d
		}
	}
}

// NewVerifier returns a Verifier of the tokens that disco's primitives of
// kind ("lock", "rwlock", "election" or "semaphore") issue on cli's
// cluster. A keyed guard verifies each request's scope (the primitive's
// prefix; a semaphore slot's prefix#slot, semaphore.Scope); an unkeyed
// guard passes none, and the Verifier then verifies name's tokens (name
// may be "" for a verifier that only keyed guards use).
func NewVerifier(cli *clientv3.Client, kind, name string, opts ...VerifierOption) (*Verifier, error) {
	if cli == nil {
		return nil, fmt.Errorf("etcdio: NewVerifier: nil client: %w", ErrInvalidArgument)
	}
	switch kind {
	case "lock", "rwlock", "election", "semaphore":
	default:
		return nil, fmt.Errorf(`etcdio: NewVerifier: kind %q, want "lock", "rwlock", "election" or "semaphore": %w`, kind, ErrInvalidArgument)
	}
	if name != "" {
		if err := checkPrefix(name); err != nil {
			return nil, fmt.Errorf("etcdio: NewVerifier: %w", err)
		}
	}
	v := &Verifier{cli: cli, kind: kind, name: name, timeout: DefaultVerifierTimeout}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("etcdio: NewVerifier: nil option: %w", ErrInvalidArgument)
		}
		o(v)
	}
	return v, nil
}

// Verify returns nil if t is the token of a current grant of scope (name if
// scope is ""), an error wrapping fencing.ErrTokenForged if it is not, and
// any other error if etcd did not answer.
func (v *Verifier) Verify(ctx context.Context, scope string, t fencing.Token) error {
	if ctx == nil {
		return fmt.Errorf("etcdio: verify: %w", driver.ContextErr(ctx))
	}
	if scope == "" {
		scope = v.name
	}
	name, slot := scope, ""
	if v.kind == "semaphore" {
		name, slot = splitSlot(scope)
	}
	if name == "" || checkPrefix(name) != nil {
		return fmt.Errorf("etcdio: verify token %d: no usable scope %q: %w", t, scope, fencing.ErrTokenForged)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, v.timeout)
		defer cancel()
	}
	var why string
	var err error
	if v.kind == "semaphore" {
		why, err = v.judgeSlot(ctx, name, slot, int64(t))
	} else {
		why, err = v.judge(ctx, scope, int64(t))
	}
	if err != nil {
		return fmt.Errorf("etcdio: verify token %d of %s %s: %w", t, v.kind, quote.Name(scope), err)
	}
	if why != "" {
		return fmt.Errorf("etcdio: token %d of %s %s: %s: %w", t, v.kind, quote.Name(scope), why, fencing.ErrTokenForged)
	}
	return nil
}

// judge returns why t is no current grant's token ("" if it is one), or an
// error if etcd could not tell.
func (v *Verifier) judge(ctx context.Context, scope string, t int64) (string, error) {
	keys := scope + "/"
	if t <= 0 {
		return "not a token", nil
	}
	// The head of the queue now, and the cluster's revision.
	now, rev, err := v.head(ctx, keys, 0)
	if err != nil {
		return "", err
	}
	if t > rev {
		return fmt.Sprintf("above the cluster's revision %d", rev), nil
	}
	switch v.kind {
	case "election":
		if now == nil || now.created != t {
			return "no term of that token leads now", nil
		}
		return "", nil
	case "rwlock":
		return v.judgeRWLock(ctx, scope, t, now)
	}
	if now == nil {
		return "no one holds the lock now", nil
	}
	then, _, err := v.head(ctx, keys, t)
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		// Revision t is gone. A holder whose key came after t did not hold
		// at t; of any other, the present cannot tell: it may have waited
		// behind the token's holder at t, released since.
		if now.created > t {
			return "the holder now came after that token", nil
		}
		return "", fmt.Errorf("revision %d is compacted: who held the lock then cannot be read: %w", t, err)
	case err != nil:
		return "", err
	case then == nil:
		return "no one held the lock at that revision", nil
	case *then != *now:
		return "the grant of that token is over", nil
	}
	return "", nil
}

// headPage is how many keys a look for the head reads at first.
const headPage = 8

// head returns the head of the queues under keys at revision rev (0: now)
// and the revision read: the oldest key of the kind's layout (ofLayout),
// so that a nested name's keys and keys without a lease (an rwlock's epoch
// key) are never taken for an owner's. It reads a few keys at a time, in
// creation order, from the oldest, all at one revision.
func (v *Verifier) head(ctx context.Context, keys string, rev int64) (*headKey, int64, error) {
	queues := []string{""}
	if v.kind == "rwlock" {
		queues = []string{"read/", "write/"}
	}
	seen := map[string]bool{}
	var from int64 // the lowest CreateRevision to read: keys of one transaction share one
	for limit := int64(headPage); ; {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(limit),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithMinCreateRev(from)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := v.cli.Get(ctx, keys, opts...)
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision // the later pages read the same revision
		}
		fresh := false
		for _, kv := range resp.Kvs {
			if seen[string(kv.Key)] {
				continue
			}
			fresh, seen[string(kv.Key)] = true, true
			if ofLayout(keys, queues, kv) {
				return &headKey{string(kv.Key), kv.CreateRevision}, rev, nil
			}
		}
		switch {
		case !resp.More:
			return nil, rev, nil
		case !fresh:
			limit *= 2 // a page of one transaction's keys, all seen: read more of it
		default:
			from = resp.Kvs[len(resp.Kvs)-1].CreateRevision
		}
	}
}

// splitSlot splits a semaphore slot's scope name#i into name and i; both
// are "" if it names no slot.
func splitSlot(scope string) (name, slot string) {
	i := strings.LastIndexByte(scope, '#')
	if i < 0 {
		return "", ""
	}
	if n, err := strconv.Atoi(scope[i+1:]); err != nil || n < 0 || strconv.Itoa(n) != scope[i+1:] {
		return "", ""
	}
	return scope[:i], scope[i+1:]
}

// judgeSlot applies the semaphore's rule (see Verifier).
func (v *Verifier) judgeSlot(ctx context.Context, name, slot string, t int64) (string, error) {
	resp, err := v.cli.Get(ctx, name+"/slot/"+slot)
	switch {
	case err != nil:
		return "", err
	case t > resp.Header.Revision:
		return fmt.Sprintf("above the cluster's revision %d", resp.Header.Revision), nil
	case len(resp.Kvs) == 0:
		return "no one holds the slot now", nil
	case resp.Kvs[0].ModRevision != t:
		return "not the slot's present claim", nil
	}
	return "", nil
}

// headKey is the head of a queue: its key and CreateRevision.
type headKey struct {
	key     string
	created int64
}

// judgeRWLock applies the rwlock's rule (see Verifier).
func (v *Verifier) judgeRWLock(ctx context.Context, scope string, t int64, head *headKey) (string, error) {
	resp, err := v.cli.Get(ctx, scope+EpochSuffix)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != t {
		return "not the lock's present epoch", nil
	}
	if head == nil {
		return "no one holds the lock now", nil
	}
	read := strings.HasPrefix(head.key, scope+"/read/")
	switch string(resp.Kvs[0].Value) {
	case readEpoch:
		if !read {
			return "no reader holds the lock now", nil
		}
	case writeEpoch:
		if read || head.created > t {
			return "the writer of that epoch holds no more", nil
		}
	default:
		return "not the lock's present epoch", nil
	}
	return "", nil
}
