package etcdio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/driver"
)

// doubleBarrier is barrier.DoubleBarrier on etcd with the layout of etcd's
// recipes.DoubleBarrier, so parties of both meet in one barrier:
//
//   - key/waiters/...: one key per party that entered, on its session's
//     lease. Names are disco's own (its lease and a number); the recipe
//     orders parties by CreateRevision and ModRevision, never by name.
//   - key/ready: written, with no lease, by the party whose key is the
//     count-th created; every party in Enter waits for it.
//
// Enter counts the parties, writes this party's key and counts again: the
// count-th key writes ready, only if every key it counted is still there
// (else it counts again), a key created after it withdraws (ErrFull),
// earlier ones wait for ready. A party whose Enter gives up deletes its key
// only if no ready was written since (else it is in the round): so no
// party both gives up and is counted. (With more than guardedParties
// parties, the count's write compares no keys, as etcd takes no more
// comparisons in one transaction, and a party giving up just as the count
// completes may be counted.) Leave: the party whose key was written first
// (lowest ModRevision) waits for every other key of its round (created
// before the round's ready) to go, then deletes ready and its own key;
// every other party deletes its key and waits for the lowest's. A party whose lease ends is gone from the barrier with its
// key, so nobody waits for it; if that was the lowest, ready stays until
// the last party of the others to leave, finding no key under waiters,
// deletes it in a transaction that checks that none exists (so a party of
// the next round, once entered, keeps its ready).
//
// Enter and Leave make their requests on the caller's goroutine, each in
// bounded attempts (Session.txn, Session.get), but each of their waits is a watch kept by
// a helper of the session (await), with follow's liveness check; the
// caller waits for the outcome.
type doubleBarrier struct {
	s      *Session
	owned  bool
	id     uint64
	key    string
	count  int
	name   string
	life   context.Context // ends with the session or Close
	cancel context.CancelFunc
	closed atomic.Bool

	mu      sync.Mutex // one Enter or Leave at a time; guards what follows
	seq     uint64
	entered bool
	mine    keyRev // this party's key, while it may exist
	// readyRev is the revision of the ready that completed this party's
	// round: the round's keys were all created before it.
	readyRev int64
}

// guardedParties is the largest count whose completion is guarded (see
// enter): its transaction compares the other parties' keys, and etcd takes
// at most 128 comparisons in one (its --max-txn-ops default).
const guardedParties = 129

// NewDoubleBarrier returns one party of the double barrier on key for count
// parties, interoperable with etcd's recipes.DoubleBarrier on the same key.
// Without WithSession the party runs its own session, closed by its Close.
func NewDoubleBarrier(cli *clientv3.Client, key string, count int, opts ...Option) (barrier.DoubleBarrier, error) {
	fail := func(err error) error { return fmt.Errorf("etcdio: new double barrier %s: %w", quote.Name(key), err) }
	o, err := checkArgs(cli, key, opts)
	if err == nil {
		err = checkLockValue("double barrier", o)
	}
	if err != nil {
		return nil, fail(err)
	}
	if count < 1 {
		return nil, fail(fmt.Errorf("count %d, want at least 1: %w", count, ErrInvalidArgument))
	}
	d := &doubleBarrier{key: key, count: count, name: "double barrier " + quote.Name(key)}
	if d.s, d.owned, err = sessionFor(cli, o); err != nil {
		return nil, fail(err)
	}
	d.id = d.s.ownerID()
	d.life, d.cancel = context.WithCancel(d.s.ctx)
	return d, nil
}

func (d *doubleBarrier) Count() int { return d.count }

func (d *doubleBarrier) Done() <-chan struct{} { return d.life.Done() }

func (d *doubleBarrier) Err() error {
	if err := d.s.Err(); err != nil && !errors.Is(err, primitives.ErrClosed) {
		return fmt.Errorf("etcdio: %s: %w", d.name, err)
	}
	if d.closed.Load() || d.s.Err() != nil {
		return fmt.Errorf("etcdio: %s: %w", d.name, primitives.ErrClosed)
	}
	return nil
}

// Close takes this party out of the barrier: with its own session, the
// session's Close revokes the lease; on a shared session its key is deleted.
func (d *doubleBarrier) Close() error {
	if d.closed.Swap(true) {
		return fmt.Errorf("etcdio: %s: already closed: %w", d.name, primitives.ErrClosed)
	}
	d.cancel() // ends a waiting Enter or Leave
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.owned {
		if err := d.s.Close(); err != nil && !errors.Is(err, primitives.ErrClosed) {
			return fmt.Errorf("etcdio: %s: close: %w", d.name, err)
		}
		d.clearIfLast()
		return nil
	}
	if d.mine.key != "" && d.s.Err() == nil {
		if err := d.s.deleteKey(d.mine.key, d.mine.rev); err != nil {
			return fmt.Errorf("etcdio: %s: close: delete %s (retrying in the background): %w", d.name, d.mine.key, err)
		}
		d.clearIfLast()
	}
	return nil
}

// clearIfLast deletes ready if no party's key is left, as the last Leave
// does: the last party of a round to close without leaving leaves nothing
// behind. Best effort, one request: a ready left (the last parties' sessions
// lost) is stale, and the next round writes its own.
func (d *doubleBarrier) clearIfLast() {
	ctx, cancel := context.WithTimeout(context.Background(), maxRequestTimeout)
	defer cancel()
	none := clientv3.Compare(clientv3.CreateRevision(d.waiters()), "=", 0).WithPrefix()
	_, _ = d.s.cli.Txn(ctx).If(none).Then(clientv3.OpDelete(d.ready())).Commit()
}

// begin checks ctx (a nil one is refused) and that the party is usable,
// and returns a context that ends with ctx or the party. The caller holds
// mu.
func (d *doubleBarrier) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if ctx == nil {
		return nil, nil, fmt.Errorf("etcdio: %s: %w", d.name, driver.ContextErr(ctx))
	}
	if err := d.Err(); err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(d.life, cancel)
	return wctx, func() { stop(); cancel() }, nil
}

// fail says why a request made under ctx failed: ctx's end (ctx.Err(), also
// when ctx's deadline has passed and etcd's timeout came back first), the
// party's end, or err.
func (d *doubleBarrier) fail(ctx context.Context, err error) error {
	if e := ctxtime.Ended(ctx); e != nil {
		return e
	}
	if e := d.Err(); e != nil {
		return e
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("etcdio: %s: %w: %w", d.name, err, primitives.ErrLost)
	}
	return fmt.Errorf("etcdio: %s: %w", d.name, err)
}

// deleted records that this party's key is deleted; if a write of it was
// unsure, it is deleted once more later (see Session.markUnsure).
func (d *doubleBarrier) deleted() {
	d.s.deletedOnce(d.mine.key)
	d.mine = keyRev{}
}

func (d *doubleBarrier) waiters() string { return d.key + "/waiters/" }
func (d *doubleBarrier) ready() string   { return d.key + "/ready" }

// Enter writes this party's key and waits until count parties have. Once
// the round is complete (ready written, by this party or another) it
// returns nil even if ctx ended meanwhile: the others pass the barrier
// counting this party.
func (d *doubleBarrier) Enter(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	wctx, done, err := d.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	if d.entered {
		return fmt.Errorf("etcdio: %s: %w", d.name, barrier.ErrEntered)
	}
	before, err := d.s.get(wctx, d.waiters(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return d.fail(ctx, err)
	}
	if before.Count >= int64(d.count) {
		return fmt.Errorf("etcdio: %s: %d of %d parties entered: %w", d.name, before.Count, d.count, barrier.ErrFull)
	}
	if err := d.roundUnderWay(wctx); errors.Is(err, barrier.ErrFull) {
		return err
	} else if err != nil {
		return d.fail(ctx, err)
	}
	d.seq++
	key := d.s.ownPrefix(d.waiters()) + strconv.FormatUint(d.id, 10) + "." + strconv.FormatUint(d.seq, 10)
	put, repeated, err := d.s.txn(wctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, "", clientv3.WithLease(d.s.lease))}, clientv3.OpGet(key))
	if err != nil {
		d.s.deleteUnknown(key) // the put's outcome is unknown
		return d.fail(ctx, err)
	}
	rev := put.Header.Revision
	if !put.Succeeded {
		// The name is this party's alone: a key of it on this session's
		// lease is an earlier attempt of this put, given up, that landed.
		kvs := put.Responses[0].GetResponseRange().Kvs
		if !repeated || len(kvs) == 0 || kvs[0].Lease != int64(d.s.lease) {
			return fmt.Errorf("etcdio: %s: key %s exists already", d.name, key)
		}
		rev = kvs[0].CreateRevision
	}
	if repeated {
		// An attempt given up may land yet, after the key is deleted.
		d.s.markUnsure(key)
	}
	readyRev, err := d.enter(wctx, key, rev)
	switch {
	case errors.Is(err, barrier.ErrFull):
		_ = d.s.deleteKey(key, rev)
		return err
	case err != nil:
		var in bool
		if in, readyRev = d.withdraw(ctx, key, rev); !in {
			return d.fail(ctx, err)
		}
		// The round completed counting this party: it is in.
	}
	d.entered, d.mine, d.readyRev = true, keyRev{key, rev}, readyRev
	return nil
}

// roundUnderWay returns an error wrapping ErrFull while a round is complete
// (ready written) and a party of it has not left: a newcomer is not of that
// round, and counting its leftovers it would complete one of its own
// without meeting its parties. A ready that no party of its round is left
// under (they closed without Leave, or their sessions ended) is stale: the
// next round writes its own.
func (d *doubleBarrier) roundUnderWay(ctx context.Context) error {
	ready, err := d.s.get(ctx, d.ready())
	if err != nil || len(ready.Kvs) == 0 {
		return err
	}
	in, err := d.s.get(ctx, d.waiters(), clientv3.WithPrefix(), clientv3.WithCountOnly(),
		clientv3.WithMaxCreateRev(ready.Kvs[0].ModRevision-1))
	switch {
	case err != nil:
		return err
	case in.Count > 0:
		return fmt.Errorf("etcdio: %s: a round of %d parties is under way, %d of them not yet left: %w", d.name, d.count, in.Count, barrier.ErrFull)
	}
	return nil
}

// withdraw deletes this party's key, created at rev, as its Enter gives
// up, unless the key is still there and ready was written after it (the
// round is complete, counting it): then in is true, with ready's revision.
// One transaction deletes the key only if there is no ready since rev, and
// a party that completes the count writes ready only if every key it
// counted is still there (see enter): no party both gives up and is
// counted. It runs even if ctx has ended, for at most one attempt's
// longest bound; if etcd does not answer by then, the same transaction is
// repeated in the background while the session lives (a key found counted
// then is deleted all the same: its Enter has failed).
func (d *doubleBarrier) withdraw(ctx context.Context, key string, rev int64) (in bool, readyRev int64) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxRequestTimeout)
	defer cancel()
	mine := clientv3.Compare(clientv3.CreateRevision(key), "=", rev)
	notReady := clientv3.Compare(clientv3.ModRevision(d.ready()), "<", rev)
	withdrawal := func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return d.s.cli.Txn(ctx).If(mine, notReady).Then(clientv3.OpDelete(key)).
			Else(clientv3.OpGet(d.ready()), clientv3.OpGet(key)).Commit()
	}
	resp, _, err := inAttempts(d.s, wctx, withdrawal)
	switch {
	case err != nil:
		// Unknown: settle it in the background, guarded as ever.
		_ = d.s.persist("double barrier key "+key, func(ctx context.Context) error {
			resp, err := withdrawal(ctx)
			if err == nil && !resp.Succeeded {
				_, err = d.s.cli.Txn(ctx).If(mine).Then(clientv3.OpDelete(key)).Commit()
			}
			return err
		})
		d.s.deletedOnce(key)
		return false, 0
	case resp.Succeeded:
		d.s.deletedOnce(key)
		return false, 0
	}
	ready, own := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(own) == 1 && own[0].CreateRevision == rev && len(ready) == 1 && ready[0].ModRevision > rev {
		return true, ready[0].ModRevision
	}
	// The key is gone (deleted by someone else, or with its lease): out.
	d.s.deletedOnce(key)
	return false, 0
}

// enter counts the parties after this one's key was written at rev, and
// waits for ready unless this party completes the count. It returns the
// revision of the ready that completed the round.
func (d *doubleBarrier) enter(ctx context.Context, key string, rev int64) (int64, error) {
	for {
		all, err := d.s.get(ctx, d.waiters(), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return 0, err
		}
		parties := all.Kvs
		if len(parties) >= d.count {
			switch last := parties[d.count-1].CreateRevision; {
			case rev > last:
				return 0, fmt.Errorf("etcdio: %s: %d parties entered first: %w", d.name, d.count, barrier.ErrFull)
			case rev == last:
				// Only if every party counted is still there: none of
				// them gave up since the read (see withdraw).
				var counted []clientv3.Cmp
				if d.count <= guardedParties {
					for _, kv := range parties[:d.count-1] {
						counted = append(counted, clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision))
					}
				}
				resp, _, err := d.s.txn(ctx, counted, []clientv3.Op{clientv3.OpPut(d.ready(), "")})
				if len(counted) > 0 && errors.Is(err, rpctypes.ErrTooManyOps) {
					// A cluster set below etcd's default --max-txn-ops:
					// the count's write compares no keys.
					resp, _, err = d.s.txn(ctx, nil, []clientv3.Op{clientv3.OpPut(d.ready(), "")})
				}
				switch {
				case err != nil:
					if r, ok := d.readyAfter(ctx, rev); ok {
						// The write landed, its answer lost or its caller
						// gone meanwhile: the others pass the barrier, and
						// this party is in the round with them.
						return r, nil
					}
					return 0, err
				case resp.Succeeded:
					return resp.Header.Revision, nil
				}
				continue // count again
			}
		}
		return d.awaitReady(ctx, key, rev)
	}
}

// readyAfter reports whether ready exists, written after rev, and its
// revision: read even if ctx has ended, for at most one attempt's longest
// bound.
func (d *doubleBarrier) readyAfter(ctx context.Context, rev int64) (int64, bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxRequestTimeout)
	defer cancel()
	resp, err := d.s.get(rctx, d.ready())
	if err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].ModRevision > rev {
		return resp.Kvs[0].ModRevision, true
	}
	return 0, false
}

// awaitReady waits for ready to be written after this party's key, created
// at rev, watching the whole barrier: the key's deletion (its lease gone,
// or someone deleted it) ends the wait with an error wrapping
// primitives.ErrLost, and has the session check its lease now.
func (d *doubleBarrier) awaitReady(ctx context.Context, key string, rev int64) (int64, error) {
	lost := func() (bool, error) {
		d.s.post(d.s.checkLease)
		return true, fmt.Errorf("key %s is gone: %w", key, primitives.ErrLost)
	}
	var readyRev atomic.Int64 // set by the helper before it says the wait is over
	err := d.await(ctx, waitFor{key: d.key + "/", opts: []clientv3.OpOption{clientv3.WithPrefix()},
		settled: func(ctx context.Context) (bool, error) {
			resp, err := d.s.cli.Txn(ctx).Then(clientv3.OpGet(d.ready()), clientv3.OpGet(key)).Commit()
			if err != nil {
				return false, err
			}
			if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != rev {
				return lost()
			}
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) > 0 && kvs[0].ModRevision >= rev {
				readyRev.Store(kvs[0].ModRevision)
				return true, nil
			}
			return false, nil
		},
		seen: func(ev *clientv3.Event) (bool, error) {
			switch string(ev.Kv.Key) {
			case d.ready():
				if ev.Type == mvccpb.PUT && ev.Kv.ModRevision >= rev {
					readyRev.Store(ev.Kv.ModRevision)
					return true, nil
				}
			case key:
				if ev.Type == mvccpb.DELETE {
					return lost()
				}
			}
			return false, nil
		},
	})
	return readyRev.Load(), err
}

// awaitGone waits until kv's key is gone: deleted, or another key of its
// name created since.
func (d *doubleBarrier) awaitGone(ctx context.Context, kv *mvccpb.KeyValue) error {
	key := string(kv.Key)
	return d.await(ctx, waitFor{key: key, opts: []clientv3.OpOption{clientv3.WithFilterPut()},
		settled: func(ctx context.Context) (bool, error) {
			resp, err := d.s.cli.Get(ctx, key)
			if err != nil {
				return false, err
			}
			return len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != kv.CreateRevision, nil
		},
		seen: func(*clientv3.Event) (bool, error) { return true, nil }, // a delete: puts are filtered
	})
}

// waitFor is what a double barrier waits for on a watch of key (opts:
// WithPrefix, ...). settled reads once the watch is in place (again after
// each reopening; a linearizable read, so it sees at least what came before
// the watch's start); seen looks at each event. Either ends the wait when it
// says over, with its error (nil: what was awaited happened). An error of
// settled that is not over is transient: the watch is reopened.
type waitFor struct {
	key     string
	opts    []clientv3.OpOption
	settled func(ctx context.Context) (over bool, err error)
	seen    func(ev *clientv3.Event) (over bool, err error)
}

// await runs w's watch on a helper of the session, kept by follow (which
// reopens a failed watch and moves a silent one to a new stream), and waits
// for its outcome until ctx ends (ctx's error, unwrapped) or the client is
// closed. The helper's watch ends when await returns.
func (d *doubleBarrier) await(ctx context.Context, w waitFor) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make(chan error, 1)
	if !d.s.post(func() { d.watchFor(ctx, w, out) }) {
		return fmt.Errorf("watch %s: the session ended", w.key) // d.fail says how
	}
	select {
	case err := <-out:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-d.s.cli.Ctx().Done():
		return fmt.Errorf("watch %s: %w", w.key, ErrClientClosed)
	}
}

// watchFor has a session helper follow w's watch until ctx ends or w is
// over, and send the outcome to out. Loop only: the loop starts helpers only
// while the session lives, so Close always waits for this one.
func (d *doubleBarrier) watchFor(ctx context.Context, w waitFor, out chan<- error) {
	d.s.goHelper(func(sctx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(sctx, cancel)()
		over := false
		settle := func(done bool, err error) error {
			if !done {
				return err // transient: follow reopens the watch
			}
			over = true
			out <- err
			cancel() // ends follow
			return nil
		}
		d.s.follow(ctx, follower{key: w.key, opts: w.opts,
			synced: func(rctx context.Context, _ int64) error {
				if over {
					return nil
				}
				return settle(w.settled(rctx))
			},
			changed: func(_ context.Context, evs []*clientv3.Event) error {
				for _, ev := range evs {
					if done, err := w.seen(ev); done && !over {
						return settle(done, err)
					}
				}
				return nil
			},
		})
	})
}

// Leave deletes this party's key in the recipe's order and waits for every
// other party's to go.
func (d *doubleBarrier) Leave(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	wctx, done, err := d.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	if !d.entered {
		return fmt.Errorf("etcdio: %s: %w", d.name, barrier.ErrNotEntered)
	}
	for {
		resp, err := d.s.get(wctx, d.waiters(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return d.fail(ctx, err)
		}
		// The parties of this round: the next round's keys came after
		// the ready that completed it.
		resp.Kvs = slices.DeleteFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool {
			return d.readyRev > 0 && kv.CreateRevision > d.readyRev
		})
		if len(resp.Kvs) == 0 {
			// Every party is gone, the lowest perhaps with its lease
			// before it could clear ready: clear it, unless a party of
			// the next round entered meanwhile.
			none := clientv3.Compare(clientv3.CreateRevision(d.waiters()), "=", 0).WithPrefix()
			if _, _, err := d.s.txn(wctx, []clientv3.Cmp{none}, []clientv3.Op{clientv3.OpDelete(d.ready())}); err != nil {
				return d.fail(ctx, err)
			}
			d.entered = false
			d.deleted()
			return nil
		}
		lowest, highest := resp.Kvs[0], resp.Kvs[0]
		present := false
		for _, kv := range resp.Kvs {
			present = present || string(kv.Key) == d.mine.key && kv.CreateRevision == d.mine.rev
			if kv.ModRevision < lowest.ModRevision {
				lowest = kv
			}
			if kv.ModRevision > highest.ModRevision {
				highest = kv
			}
		}
		if d.mine.key != "" && !present {
			// Gone with the lease, or deleted by someone else: either way
			// this party is out, and waits for the others as any Leave
			// does. Have the session check its lease now: a lost session
			// ends the wait.
			d.s.post(d.s.checkLease)
			d.deleted()
			continue
		}
		isLowest := string(lowest.Key) == d.mine.key
		wait := lowest
		switch {
		case isLowest && len(resp.Kvs) == 1:
			// The last to leave clears the barrier for its next use: its
			// round's ready, not one the next round wrote already.
			clear := clientv3.OpDelete(d.ready())
			if d.readyRev > 0 {
				clear = clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(d.ready()), "=", d.readyRev)},
					[]clientv3.Op{clear}, nil)
			}
			if _, _, err := d.s.txn(wctx, nil, []clientv3.Op{clear, clientv3.OpDelete(d.mine.key)}); err != nil {
				return d.fail(ctx, err)
			}
			d.deleted()
			d.entered = false
			return nil
		case isLowest:
			wait = highest
		case d.mine.key != "":
			mine := clientv3.Compare(clientv3.CreateRevision(d.mine.key), "=", d.mine.rev)
			if _, _, err := d.s.txn(wctx, []clientv3.Cmp{mine}, []clientv3.Op{clientv3.OpDelete(d.mine.key)}); err != nil {
				return d.fail(ctx, err)
			}
			d.deleted()
		}
		if err := d.awaitGone(wctx, wait); err != nil {
			return d.fail(ctx, err)
		}
	}
}
