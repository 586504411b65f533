package etcdio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
)

// ErrPrefixInUse is returned when a primitive's prefix overlaps that of a
// primitive of another kind (or a nested prefix) on the same session: the two
// would read each other's keys as their own queue.
var ErrPrefixInUse = errors.New("etcdio: prefix in use by another primitive")

// spec is what sets one kind of primitive apart: everything else about lock,
// rwlock and election is the one service type below.
type spec struct {
	kind       string // "lock", "rwlock", "election": for errors and claims
	errTaken   error  // a Try's failure (locks)
	errNotHeld error  // a release of a grant that is not held
	// ownQueues are the queue prefixes under the service's prefix where its
	// keys go. A lock service mirrors its session's own keys in each, to
	// notice a held or waiting key deleted by someone else (see
	// watchOwnSoon).
	ownQueues []string
	// election: a term's token is its key's CreateRevision, a waiting
	// candidate follows the key just ahead alone (see aheadPrefix), and
	// the service mirrors the whole prefix, values included, while anyone
	// listens: who leads is the first of everyone's keys.
	election bool
	// keyTag, if set, starts the session-unique part of every key name
	// (after "<lease>-"), so that a reader of the prefix tells the kind
	// apart: a lock's keys carry a value too (WithValue), as an election's
	// do, and only their names tell them apart.
	keyTag string
	// token, if set, issues the token of a key that holds, off the loop;
	// otherwise the token is the revision at which the key was confirmed to
	// hold (locks) or its CreateRevision (elections).
	token func(ctx context.Context, svc *service, g driver.Hold) (int64, error)
}

// service is one primitive on a session: a lock, an rwlock or an election,
// as its spec says. It holds at most one grant at a time (a lock's hold, a
// read or write driver.Hold, a term as leader), and has at most one key waiting
// for its turn.
type service struct {
	*driver.Shell // the driver.Hold, the events, Done and Err, one hold at a time
	spec          *spec
	s             *Session
	owned         bool   // the session is this service's own
	id            uint64 // names this service's keys, with the lease
	name          string // "lock /pfx", for errors
	prefix        string // the caller's prefix + "/"
	maxValue      int    // the largest election value accepted
	value         string // a lock's keys' value (WithValue)
	metrics       *metrics.Metrics

	// keys counts the service's key names and retired skips names whose
	// keys' fate is unknown; only callers in the shell (Enter) touch them.
	keys, retired uint64
	// lastCreated is the highest create revision of a key the service
	// wrote: a key of its names created later is one of create's own
	// attempts, not a leftover. Same rule as keys.
	lastCreated int64

	// Owned by the loop.
	waiter *waiter
	// mirrors: its session's own keys', once a grant or a wait has lived a
	// while (see watchOwnSoon); ownTimer is armed until then.
	mirrors  []*mirror
	ownTimer *time.Timer
	ownDue   time.Time // when ownTimer fires
	// Locks: the deletions of the session's keys whose key the waiter
	// waits behind, or waited behind last (see followAhead); aheadIdle
	// counts its changes since while nobody waits on it.
	aheadMirror *mirror
	aheadIdle   int
	// vanished is the Created of a grant whose key was seen deleted: Lost
	// waits for the lease check to say whether someone deleted it or the
	// lease went with it.
	vanished int64
	// seen is the revision of this service's latest successful write: an
	// election's Observe waits for its mirror to reach it.
	seen int64
	// Elections only: who listens (subscribers, observers), the mirror of
	// the prefix while anyone does, and the leader last reported.
	listeners    *driver.Listeners
	leaderMirror *mirror
	observers    *actor.Fanout[election.Leadership]
	leader       election.Leadership
	pending      []observeCall
}

// newService validates the input, joins or starts a session and registers
// the service on its loop.
func newService(sp *spec, cli *clientv3.Client, prefix string, opts []Option) (*service, error) {
	fail := func(err error) error { return fmt.Errorf("etcdio: new %s %s: %w", sp.kind, quote.Name(prefix), err) }
	o, err := checkArgs(cli, prefix, opts)
	if err != nil {
		return nil, fail(err)
	}
	if err := checkLockValue(sp.kind, o); err != nil {
		return nil, fail(err)
	}
	s, owned, err := sessionFor(cli, o)
	if err != nil {
		return nil, fail(err)
	}
	m := o.Metrics
	if m == nil {
		m = s.metrics
	}
	name := sp.kind + " " + prefix
	var svc *service
	var listeners *driver.Listeners
	if sp.election {
		listeners = driver.NewListeners(func() { s.post(func() { svc.listenersChanged() }) })
	}
	svc = &service{
		Shell: driver.NewShell(driver.Spec{Kind: sp.kind, Name: name, NotHeld: sp.errNotHeld, Taken: sp.errTaken,
			CancelOnSuspend: o.CancelOnSuspend, Metrics: m, Listeners: listeners}),
		listeners: listeners,
		spec:      sp,
		name:      name,
		prefix:    prefix + "/",
		maxValue:  o.maxValue,
		value:     o.value,
		metrics:   m,
		s:         s,
		id:        s.ownerID(),
		owned:     owned,
	}
	if sp.election {
		svc.observers = actor.NewFanout(func(election.Leadership) bool { return true })
	}
	if _, err = call(o.Context, s, svc.joined); err != nil {
		if svc.owned {
			_ = s.Close()
		}
		return nil, fail(err)
	}
	return svc, nil
}

// ours reports whether kv, a key under the service's prefix, is of its
// layout: a key with a lease (every owner's key has one; an rwlock's epoch
// key and a plain barrier's key have none) directly in one of the
// service's queues (an election's keys are directly under the prefix). A
// key with a further "/" belongs to a nested name (the lock /n/sub's keys
// lie within /n's prefix), which the service never takes for one of its
// own queue.
func (svc *service) ours(kv *mvccpb.KeyValue) bool {
	return ofLayout(svc.prefix, svc.spec.ownQueues, kv)
}

// ofLayout is ours for a primitive whose keys lie under prefix (ending in
// "/") in queues (nil: directly under prefix).
func ofLayout(prefix string, queues []string, kv *mvccpb.KeyValue) bool {
	rest, ok := strings.CutPrefix(string(kv.Key), prefix)
	if !ok || kv.Lease == 0 {
		return false
	}
	if len(queues) == 0 {
		queues = []string{""}
	}
	for _, q := range queues {
		if x, ok := strings.CutPrefix(rest, q); ok && x != "" && !strings.Contains(x, "/") {
			return true
		}
	}
	return false
}

// oursByName is ours for a key read without its value and lease (a
// keys-only range, which etcd serves from its index alone, with no read of
// the keys' values): a key directly in one of the service's queues whose
// name starts as every disco owner's does ("<lease in hex>-") is of the
// layout. sure is false for any other key directly in a queue (etcd's Mutex
// names its key "<lease in hex>" alone; a key without a lease may carry any
// name), which only a read with leases tells apart (ours).
func (svc *service) oursByName(kv *mvccpb.KeyValue) (isOurs, sure bool) {
	rest, ok := strings.CutPrefix(string(kv.Key), svc.prefix)
	if !ok {
		return false, true
	}
	queues := svc.spec.ownQueues
	if len(queues) == 0 {
		queues = []string{""}
	}
	for _, q := range queues {
		x, ok := strings.CutPrefix(rest, q)
		if !ok || x == "" || strings.Contains(x, "/") {
			continue
		}
		i := strings.IndexByte(x, '-')
		if i <= 0 {
			return false, false
		}
		if _, err := strconv.ParseUint(x[:i], 16, 64); err != nil {
			return false, false
		}
		return true, true
	}
	return false, true
}

// checkPrefix accepts what names a queue of its own: not empty, not "/", at
// most maxPrefix bytes. A trailing "/" is kept: keys go under prefix+"/",
// exactly where etcd's concurrency.Mutex puts them for the same prefix.
// checkArgs validates what every constructor of a primitive is given: its
// options, its prefix (or key) and its client.
func checkArgs(cli *clientv3.Client, prefix string, opts []Option) (options, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return options{}, err
	}
	if err := checkPrefix(prefix); err != nil {
		return options{}, err
	}
	if err := checkClient(cli); err != nil {
		return options{}, err
	}
	return o, nil
}

// sessionFor returns the session a primitive runs on: the one given with
// WithSession, which must use cli, or a new one the primitive owns (owned
// true: its Close closes it).
func sessionFor(cli *clientv3.Client, o options) (s *Session, owned bool, err error) {
	if o.session == nil {
		s, err = newSession(cli, o)
		return s, err == nil, err
	}
	if o.session.cli != cli {
		return nil, false, fmt.Errorf("WithSession: the session uses another etcd client: %w", ErrInvalidArgument)
	}
	return o.session, false, nil
}

func checkPrefix(prefix string) error {
	switch {
	case prefix == "":
		return fmt.Errorf("empty prefix: %w", ErrInvalidArgument)
	case prefix == "/":
		return fmt.Errorf(`prefix "/": keys would go under "//", the root of every other prefix: %w`, ErrInvalidArgument)
	case len(prefix) > maxPrefix:
		return fmt.Errorf("prefix of %d bytes, more than %d: %w", len(prefix), maxPrefix, ErrInvalidArgument)
	}
	return nil
}

// joined claims the prefix on the session, opens the service's mirrors and
// registers it. Loop only.
func (svc *service) joined(r actor.Reply[struct{}]) {
	s := svc.s
	if err := s.claim(svc.prefix, svc.spec.kind); err != nil {
		r.Answer(struct{}{}, err)
		return
	}
	s.services[svc] = struct{}{}
	if s.clock.Suspended() {
		svc.Suspend(s.clock.Deadline()) // a grant made before Resume hears it
	}
	if !r.Answer(struct{}{}, nil) {
		svc.detach()
	}
}

// detach undoes joined. Loop only.
func (svc *service) detach() {
	delete(svc.s.services, svc)
	svc.dropAhead()
	svc.closeMirrors()
	if svc.spec.election {
		svc.listenersChanged()
	}
	svc.s.unclaim(svc.prefix)
}

// callErr turns a failed request or loop call into what the caller should
// see: its own context's error if that ended or its deadline passed, the
// service's if it is done.
func (svc *service) callErr(ctx context.Context, err error) error {
	if e := ctxtime.Ended(ctx); e != nil {
		return e
	}
	if e := svc.Err(); e != nil {
		return e
	}
	return err
}

// nextKey returns the name of this service's next key under queue: a name
// no other service, on this session or any other, uses, and never the name
// of the service's previous key. It alternates between two names: reusing
// names keeps etcd's index of the prefix from growing with every
// acquisition until the next compaction, which would make every range over
// the prefix slower (etcd's own Mutex reuses one key per session). Each
// acquisition creates its key anew, with a new revision. A name whose key's
// fate is unknown (see retire) is never used again. The caller is in sem.
func (svc *service) nextKey(queue string) string {
	svc.keys++
	return svc.s.ownPrefix(queue) + svc.spec.keyTag + strconv.FormatUint(svc.id, 10) + "." + strconv.FormatUint(svc.keys%2+svc.retired, 10)
}

// sessionEnded ends the service with its session. Loop only.
func (svc *service) sessionEnded(err error) {
	err = fmt.Errorf("etcdio: %s: %w", svc.name, err)
	if svc.ownTimer != nil {
		svc.ownTimer.Stop()
	}
	svc.endGrantFor(err)
	svc.stopWaiter(err)
	svc.finish(err)
}

// finish marks the service done for err and answers every call still parked
// on it. Loop only.
func (svc *service) finish(err error) {
	if svc.Ended() {
		return
	}
	for _, c := range svc.pending {
		c.reply.Answer(nil, err)
	}
	svc.pending = nil
	if svc.observers != nil {
		svc.observers.Close()
	}
	svc.Finish(err)
}

// Close ends the service: its grant is released and its waiting key
// withdrawn, in etcd too. With its own session, the session's Close revokes
// the lease; on a shared session the keys are deleted, and a delete that
// fails is retried in the background while the session lives. While etcd
// does not answer, Close waits for one attempt of the delete (see the
// package doc: 2 s at first, up to 8 s) and returns its error.
func (svc *service) Close() error {
	return svc.CloseOnce(func() error {
		_, _, err := svc.closeEnding()
		return err
	})
}

// closeEnding is the first Close's work (see driver.Shell.CloseOnce), also
// returning the grant it ended, if any (held): the one the loop held when
// Close's turn came, which may have been granted after Close was called.
func (svc *service) closeEnding() (ended driver.Hold, held bool, _ error) {
	c, err := call(context.Background(), svc.s, svc.closed)
	ended, held = c.ended, c.held
	keys := c.keys
	if svc.owned {
		if err := svc.s.Close(); err != nil && !errors.Is(err, primitives.ErrClosed) {
			return ended, held, fmt.Errorf("etcdio: %s: close: %w", svc.name, err)
		}
		return ended, held, nil
	}
	if err != nil {
		return ended, held, nil // the session ended: its lease took the keys
	}
	var errs []error
	for _, k := range keys {
		if err := svc.s.deleteKey(k.key, k.rev); err != nil {
			errs = append(errs, fmt.Errorf("etcdio: %s: close: delete %s (retrying in the background): %w", svc.name, k.key, err))
		}
	}
	return ended, held, errors.Join(errs...)
}

// closing is what closed did: the keys to delete, and the grant it ended.
type closing struct {
	keys  []keyRev
	ended driver.Hold
	held  bool
}

// closed ends the grant and the wait, detaches the service from the session
// and answers with the keys to delete. Loop only.
func (svc *service) closed(r actor.Reply[closing]) {
	if svc.Ended() {
		r.Answer(closing{}, nil)
		return
	}
	err := fmt.Errorf("etcdio: %s: %w", svc.name, primitives.ErrClosed)
	var c closing
	c.ended, c.held = svc.Current()
	c.keys = append(svc.endGrantFor(err), svc.stopWaiter(err)...)
	svc.detach()
	svc.finish(err)
	r.Answer(c, nil)
}

// keyRev names a key this session wrote, with its CreateRevision (0:
// unknown).
type keyRev struct {
	key string
	rev int64
}

// claim records that a primitive of kind uses prefix on this session.
// Primitives of one kind may share a prefix; a prefix that is another kind's,
// or nests in or around another, is refused. Loop only.
func (s *Session) claim(prefix, kind string) error {
	for p, c := range s.claims {
		if p == prefix && c.kind != kind || p != prefix && (strings.HasPrefix(p, prefix) || strings.HasPrefix(prefix, p)) {
			return fmt.Errorf("%s %s overlaps %s %s on this session: %w",
				kind, quote.Name(strings.TrimSuffix(prefix, "/")), c.kind, quote.Name(strings.TrimSuffix(p, "/")), ErrPrefixInUse)
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
