package etcdio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// ErrPrefixInUse is returned when a primitive's prefix overlaps that of a
// primitive of another kind (or a nested prefix) on the same session: the two
// would read each other's keys as their own queue.
var ErrPrefixInUse = errors.New("etcdio: prefix in use by another primitive")

// primitive is what every service is to its session.
type primitive interface {
	member
	mirrorWatcher
}

// base is what lock, rwlock and election share: a session (their own or a
// shared one), a mirror of their prefix, subscribers, and their end.
type base struct {
	holds
	s     *Session
	self  primitive
	owned bool   // the session is this service's own
	id    uint64 // names this service's keys, with the lease
	// acquisitions counts acquisitions, to alternate key names; only
	// callers holding the service's semaphore touch it.
	acquisitions uint64
	name         string // "lock pfx", for errors
	prefix       string // the caller's prefix + "/"
	events       *actor.Fanout[primitives.Event]
	done         chan struct{}

	errMu     sync.Mutex
	err       error
	closeOnce sync.Once

	// Owned by the loop.
	mirrors []*mirror // what this service watches; see start
	ended   bool
}

// keyRev names a key this service wrote, with its CreateRevision.
type keyRev struct {
	key string
	rev int64
}

// start validates the input, joins or starts a session, claims prefix on it,
// and opens a mirror of each prefix that watch returns (given the session and
// the service's prefix + "/"), full mirrors if puts.
func (b *base) start(kind string, cli *clientv3.Client, prefix string, opts []Option, self primitive,
	errNotHeld error, watch func(s *Session, prefix string) (prefixes []string, puts bool)) error {
	fail := func(err error) error { return fmt.Errorf("etcdio: new %s %q: %w", kind, prefix, err) }
	o, err := buildOptions(opts)
	if err != nil {
		return fail(err)
	}
	if prefix == "" {
		return fail(fmt.Errorf("empty prefix: %w", ErrInvalidArgument))
	}
	if err := checkClient(cli); err != nil {
		return fail(err)
	}
	s := o.session
	if s == nil {
		if s, err = newSession(cli, o); err != nil {
			return fail(err)
		}
		b.owned = true
	} else if s.cli != cli {
		return fail(fmt.Errorf("WithSession: the session uses another etcd client: %w", ErrInvalidArgument))
	}
	b.s, b.self = s, self
	b.id = s.ownerID()
	b.name = kind + " " + prefix
	b.prefix = prefix + "/"
	b.events = actor.NewFanout(primitives.Coalescable)
	b.done = make(chan struct{})
	b.sem = make(chan struct{}, 1)
	b.errNotHeld = errNotHeld
	_, err = call(context.Background(), s, func(r actor.Reply[struct{}]) {
		if err := s.claim(b.prefix, kind); err != nil {
			r.Answer(struct{}{}, err)
			return
		}
		prefixes, puts := watch(s, b.prefix)
		for _, p := range prefixes {
			b.mirrors = append(b.mirrors, s.openMirror(p, puts, self))
		}
		s.members[self] = struct{}{}
		r.Answer(struct{}{}, nil)
	})
	if err != nil {
		if b.owned {
			_ = s.Close()
		}
		return fail(err)
	}
	return nil
}

// Subscribe delivers this owner's events that happen after it returns; see
// package primitives for the rules. The channel is closed when ctx ends or,
// after the remaining events, when the service is done.
func (b *base) Subscribe(ctx context.Context) <-chan primitives.Event { return b.events.Subscribe(ctx) }

// Done is closed when the service's session ended or Close was called.
func (b *base) Done() <-chan struct{} { return b.done }

// Err is nil while the service is usable; then it wraps primitives.ErrLost
// or primitives.ErrClosed.
func (b *base) Err() error {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	return b.err
}

// usable returns why a new call cannot start, if it cannot.
func (b *base) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.Err()
}

// callErr turns a failed RPC or loop call into what the caller should see:
// its own context's error if that ended, the service's if it is done.
func (b *base) callErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if e := b.Err(); e != nil {
		return e
	}
	return err
}

// finish marks the service done for err. Loop only.
func (b *base) finish(err error) {
	if b.ended {
		return
	}
	b.ended = true
	b.errMu.Lock()
	b.err = err
	b.errMu.Unlock()
	close(b.done)
	b.events.Close()
}

// endEvent is what a hold's owner sees when the session ends: Released if
// the session was closed, Lost otherwise.
func endEvent(g *hold, err error) primitives.Event {
	if errors.Is(err, primitives.ErrClosed) {
		return primitives.Released{Key: g.key, Token: fencing.Token(g.token), Created: g.createRev}
	}
	return primitives.Lost{Key: g.key, Token: fencing.Token(g.token), Created: g.createRev, Err: err}
}

// close detaches the service from its session; collect, run on the loop,
// ends the service's holds and waits and returns their keys, which are then
// deleted (or, with the service's own session, revoked with the lease).
func (b *base) close(collect func() []keyRev) error {
	first := false
	b.closeOnce.Do(func() { first = true })
	if !first {
		return fmt.Errorf("etcdio: %s: already closed: %w", b.name, primitives.ErrClosed)
	}
	keys, err := call(context.Background(), b.s, func(r actor.Reply[[]keyRev]) {
		if b.ended {
			r.Answer(nil, nil)
			return
		}
		keys := collect()
		delete(b.s.members, b.self)
		for _, m := range b.mirrors {
			b.s.closeMirror(m, b.self)
		}
		b.s.unclaim(b.prefix)
		b.finish(fmt.Errorf("etcdio: %s: %w", b.name, primitives.ErrClosed))
		r.Answer(keys, nil)
	})
	if b.owned {
		if err := b.s.Close(); err != nil && !errors.Is(err, primitives.ErrClosed) {
			return err
		}
		return nil
	}
	if err != nil {
		return nil // the session ended: its lease took the keys
	}
	ctx, cancel := context.WithTimeout(b.s.cli.Ctx(), cleanupTimeout)
	defer cancel()
	var errs []error
	for _, k := range keys {
		_, err := b.s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k.key), "=", k.rev)).
			Then(clientv3.OpDelete(k.key)).Commit()
		if err != nil {
			errs = append(errs, fmt.Errorf("etcdio: %s: close: delete %s: %w", b.name, k.key, err))
		}
	}
	return errors.Join(errs...)
}

// nextKey returns the name of this service's next key under queue: a name
// no other service, on this session or any other, uses, and never the name
// of the service's previous acquisition. It alternates between two names:
// reusing names keeps etcd's index of the prefix from growing with every
// acquisition until the next compaction, which would make every range over
// the prefix slower (etcd's own Mutex reuses one key per session). Each
// acquisition creates its key anew, with a new revision. The caller holds
// the service's semaphore, which orders the calls.
func (b *base) nextKey(queue string) string {
	b.acquisitions++
	return b.s.ownPrefix(queue) + strconv.FormatUint(b.id, 10) + "." + strconv.FormatUint(b.acquisitions%2, 10)
}

// mirrorOf returns the service's mirror whose prefix covers key, or nil.
// Loop only.
func (b *base) mirrorOf(key string) *mirror {
	for _, m := range b.mirrors {
		if strings.HasPrefix(key, m.prefix) {
			return m
		}
	}
	return nil
}

// gone reports whether key, written at rev, is known to be deleted: a
// mirror covering it has reached rev and no longer has it. Loop only.
func (b *base) gone(key string, rev int64) bool {
	m := b.mirrorOf(key)
	return m != nil && m.gone(key, rev)
}

// claim records that a primitive of kind uses prefix on this session.
// Primitives of one kind may share a prefix; a prefix that is another kind's,
// or nests in or around another, is refused. Loop only.
func (s *Session) claim(prefix, kind string) error {
	for p, c := range s.claims {
		if p == prefix && c.kind != kind || p != prefix && (strings.HasPrefix(p, prefix) || strings.HasPrefix(prefix, p)) {
			return fmt.Errorf("%s %q overlaps %s %q on this session: %w",
				kind, strings.TrimSuffix(prefix, "/"), c.kind, strings.TrimSuffix(p, "/"), ErrPrefixInUse)
		}
	}
	c := s.claims[prefix]
	c.kind = kind
	c.refs++
	s.claims[prefix] = c
	return nil
}

// unclaim undoes one claim. Loop only.
func (s *Session) unclaim(prefix string) {
	c := s.claims[prefix]
	if c.refs--; c.refs <= 0 {
		delete(s.claims, prefix)
	} else {
		s.claims[prefix] = c
	}
}

type claim struct {
	kind string
	refs int
}
