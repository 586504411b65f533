package etcdio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/fencing"
)

// MarkStore keeps fencing guards' marks in etcd (guard.WithStore): one key
// per scope, prefix + scope, holding the mark in decimal. Raise is a
// compare-and-swap on the key's ModRevision (or its absence), retried until
// the stored mark is at least the token, so concurrent raises from any
// number of processes never lower a mark; a raise is durable once etcd has
// committed it (a majority of members). Load is a linearizable read and
// RaiseLoad (guard.RaiseLoader) reports the mark its raise found or wrote,
// so guards on several hosts can share the keys and fence as one resource
// (guard.WithStore).
//
// Every Load and Raise ends: within its context's deadline if it has one,
// and otherwise within the store's timeout (DefaultMarkStoreTimeout, or
// WithMarkStoreTimeout), with an error wrapping context.DeadlineExceeded,
// also when etcd is unreachable. (A guard bounds its waits on the store by
// its own timeout as well; see guard.WithStoreTimeout.)
//
// The caller owns cli; MarkStore never closes it.
type MarkStore struct {
	cli     *clientv3.Client
	prefix  string
	timeout time.Duration
}

// DefaultMarkStoreTimeout bounds each Load and Raise of a MarkStore whose
// context has no deadline, unless WithMarkStoreTimeout says otherwise.
const DefaultMarkStoreTimeout = 5 * time.Second

// MarkStoreOption configures NewMarkStore.
type MarkStoreOption func(*MarkStore)

// WithMarkStoreTimeout bounds each Load and Raise whose context has no
// deadline by d instead of DefaultMarkStoreTimeout (d <= 0 means the
// default). A context's own deadline, when set, is used as is.
func WithMarkStoreTimeout(d time.Duration) MarkStoreOption {
	return func(s *MarkStore) {
		if d > 0 {
			s.timeout = d
		}
	}
}

// NewMarkStore returns a MarkStore over the keys under prefix (non-empty;
// end it with "/" to keep the scopes' keys apart from other keys).
func NewMarkStore(cli *clientv3.Client, prefix string, opts ...MarkStoreOption) (*MarkStore, error) {
	if cli == nil {
		return nil, fmt.Errorf("etcdio: NewMarkStore: nil client: %w", ErrInvalidArgument)
	}
	if prefix == "" {
		return nil, fmt.Errorf("etcdio: NewMarkStore: empty prefix: %w", ErrInvalidArgument)
	}
	s := &MarkStore{cli: cli, prefix: prefix, timeout: DefaultMarkStoreTimeout}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s, nil
}

// bound returns ctx, bounded by the store's timeout if it has no deadline;
// an error wrapping ErrInvalidArgument for a nil ctx, for which what
// called it asks nothing of etcd.
func (s *MarkStore) bound(ctx context.Context, what string) (context.Context, context.CancelFunc, error) {
	if ctx == nil {
		return nil, nil, fmt.Errorf("etcdio: MarkStore: %s: nil context: %w", what, ErrInvalidArgument)
	}
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	return ctx, cancel, nil
}

// ctxErr makes err, a failed request's error, wrap ctx's error once ctx has
// ended, so that a request cut short by its deadline says so.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", err, cerr)
	}
	return err
}

// get returns the stored mark of key and the key's ModRevision (0: absent).
func (s *MarkStore) get(ctx context.Context, key string) (fencing.Token, int64, error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return 0, 0, fmt.Errorf("etcdio: MarkStore: reading %q: %w", key, ctxErr(ctx, err))
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, nil
	}
	kv := resp.Kvs[0]
	t, err := fencing.ParseToken(string(kv.Value))
	if err != nil {
		return 0, 0, corrupt(key, err)
	}
	return t, kv.ModRevision, nil
}

// Load returns the mark of scope, 0 if it has none.
func (s *MarkStore) Load(ctx context.Context, scope string) (fencing.Token, error) {
	ctx, cancel, err := s.bound(ctx, "Load")
	if err != nil {
		return 0, err
	}
	defer cancel()
	t, _, err := s.get(ctx, s.prefix+scope)
	return t, err
}

// Raise sets the mark of scope to t if t is above it.
func (s *MarkStore) Raise(ctx context.Context, scope string, t fencing.Token) error {
	_, err := s.RaiseLoad(ctx, scope, t)
	return err
}

// RaiseLoad is Raise, and returns the mark of scope after it, at least t
// (guard.RaiseLoader): t if the compare-and-swap wrote it, else the higher
// mark its linearizable read found.
func (s *MarkStore) RaiseLoad(ctx context.Context, scope string, t fencing.Token) (fencing.Token, error) {
	if t <= 0 {
		return 0, fmt.Errorf("etcdio: MarkStore: Raise: %d is not a token: %w", t, ErrInvalidArgument)
	}
	ctx, cancel, err := s.bound(ctx, "Raise")
	if err != nil {
		return 0, err
	}
	defer cancel()
	key := s.prefix + scope
	cur, rev, err := s.get(ctx, key)
	for {
		if err != nil {
			return 0, err
		}
		if t <= cur {
			return cur, nil
		}
		resp, txnErr := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, strconv.FormatInt(int64(t), 10))).
			Else(clientv3.OpGet(key)).
			Commit()
		if txnErr != nil {
			return 0, fmt.Errorf("etcdio: MarkStore: raising %q to %d: %w", key, t, ctxErr(ctx, txnErr))
		}
		if resp.Succeeded {
			return t, nil
		}
		// Someone else wrote the key in between: look at what it holds now.
		cur, rev = 0, 0
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			rev = kvs[0].ModRevision
			cur, err = fencing.ParseToken(string(kvs[0].Value))
			if err != nil {
				err = corrupt(key, err)
			}
		}
	}
}

// corrupt is the error of key, which holds no mark: the parse error is
// told, not wrapped, since it wraps fencing's token errors and it is no
// client's token that is bad (a guard answers a store failure, 503).
func corrupt(key string, parseErr error) error {
	return fmt.Errorf("etcdio: MarkStore: key %q does not hold a mark: %v", key, parseErr)
}
