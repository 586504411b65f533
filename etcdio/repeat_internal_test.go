package etcdio

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// A request whose answer is lost (etcd applied it, the client heard "request
// timed out") is made again, and the repeat finds what the first attempt
// did and keeps it: a take gets one slot or epoch and the token of the
// write that landed, a give-back reports success, and nothing is left.
func TestRepeatAfterALostAnswer(t *testing.T) {
	type run struct {
		ctx    context.Context
		cli    *clientv3.Client // answers lost as the case says
		clean  *clientv3.Client // every answer heard
		prefix string
	}
	// semaphoreCycle acquires and releases a permit, checking the grant
	// with check (if any) in between.
	semaphoreCycle := func(check func(*testing.T, run, semaphore.Grant)) func(*testing.T, run) {
		return func(t *testing.T, r run) {
			m, err := NewSemaphore(r.cli, r.prefix, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			g, err := m.Acquire(r.ctx)
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			if check != nil {
				check(t, r, g)
			}
			if err := m.Release(r.ctx, g); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
	for _, c := range []struct {
		name string
		// lose picks the transaction whose answer is lost: the first whose
		// Then puts (put) or deletes a key containing part.
		put  bool
		part string
		use  func(t *testing.T, r run)
	}{
		{"semaphore claim", true, "/slot/", semaphoreCycle(func(t *testing.T, r run, g semaphore.Grant) {
			slots, err := r.clean.Get(r.ctx, r.prefix+"/slot/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if len(slots.Kvs) != 1 || slots.Kvs[0].ModRevision != int64(g.FencingToken) {
				t.Fatalf("claims %v after an Acquire with token %d, want one, written at the token", slots.Kvs, g.FencingToken)
			}
		})},
		{"semaphore release", false, "/q/", semaphoreCycle(nil)},
		{"lock", true, "/", func(t *testing.T, r run) {
			l, err := NewLock(r.cli, r.prefix)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			before, err := r.clean.Get(r.ctx, r.prefix+"/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			g, err := l.Lock(r.ctx)
			if err != nil {
				t.Fatalf("Lock whose first write's answer was lost: %v", err)
			}
			if puts, deletes := etcdtest.Writes(t, r.clean, r.prefix, before.Header.Revision+1); puts != 1 || deletes != 0 {
				t.Fatalf("Lock wrote %d keys and deleted %d, want 1 and 0 (its key, kept by the repeat)", puts, deletes)
			}
			keys, err := r.clean.Get(r.ctx, r.prefix+"/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if len(keys.Kvs) != 1 || keys.Kvs[0].CreateRevision != int64(g.FencingToken) {
				t.Fatalf("keys %v after a Lock with token %d, want one, created at the token", keys.Kvs, g.FencingToken)
			}
			if err := l.Unlock(r.ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"unlock", false, "/", func(t *testing.T, r run) {
			l, err := NewLock(r.cli, r.prefix)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if _, err := l.Lock(r.ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(r.ctx); err != nil {
				t.Fatalf("Unlock whose first answer was lost: %v", err)
			}
		}},
		{"read epoch", true, EpochSuffix, func(t *testing.T, r run) {
			l, err := NewRWLock(r.cli, r.prefix)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			g, err := l.RLock(r.ctx)
			if err != nil {
				t.Fatal(err)
			}
			epoch, err := r.clean.Get(r.ctx, r.prefix+EpochSuffix)
			if err != nil {
				t.Fatal(err)
			}
			if len(epoch.Kvs) != 1 || epoch.Kvs[0].ModRevision != int64(g.FencingToken) || string(epoch.Kvs[0].Value) != readEpoch {
				t.Fatalf("epoch %v after an RLock with token %d, want the read epoch opened at the token", epoch.Kvs, g.FencingToken)
			}
			if err := l.RUnlock(r.ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"double barrier enter", true, "/waiters/", func(t *testing.T, r run) {
			d, err := NewDoubleBarrier(r.cli, r.prefix, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if err := d.Enter(r.ctx); err != nil {
				t.Fatalf("Enter whose first put's answer was lost: %v", err)
			}
			if err := d.Leave(r.ctx); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			prefix := "/test/repeat/" + t.Name()
			cli := etcdtest.NewClient(t)
			// The first transaction the case picks is applied, and its
			// answer lost: etcd's "request timed out" comes back instead.
			lose := func(ops []clientv3.Op) bool {
				return slices.ContainsFunc(ops, func(op clientv3.Op) bool {
					key := string(op.KeyBytes())
					return (c.put && op.IsPut() || !c.put && op.IsDelete()) && strings.Contains(key, c.part) && strings.HasPrefix(key, prefix)
				})
			}
			var lost atomic.Int32
			cli.KV = &hookedKV{KV: cli.KV, commit: func(then []clientv3.Op, resp *clientv3.TxnResponse, err error) (*clientv3.TxnResponse, error) {
				if err == nil && lose(then) && lost.CompareAndSwap(0, 1) {
					return nil, rpctypes.ErrTimeout
				}
				return resp, err
			}}
			clean := etcdtest.NewClient(t)
			// What an earlier run left beside the prefix: a read-write
			// lock's epoch, a semaphore's permits.
			if _, err := clean.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
			c.use(t, run{ctx: ctx, cli: cli, clean: clean, prefix: prefix})
			if lost.Load() != 1 {
				t.Fatalf("%d answers lost, want 1", lost.Load())
			}
			left, err := clean.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				t.Fatal(err)
			}
			if len(left.Kvs) != 0 {
				t.Fatalf("%d keys left under %s", len(left.Kvs), prefix)
			}
		})
	}
}

// TestLateWriteDeletedAgain: an enqueue whose first attempt etcd has not
// applied when the client gives it up (it hears "request timed out") is
// repeated under the same name and lands. If that first attempt lands only
// after the release deleted the key (its compare passes then), the key it
// writes, under the live session's lease, is deleted once more by the
// session: otherwise everyone queued behind it would wait until the
// session ends. Before, only a key deleted by a withdrawal or Close was
// deleted again, not one deleted by its release.
func TestLateWriteDeletedAgain(t *testing.T) {
	type closer interface{ Close() error }
	for _, c := range []struct {
		name, part string // the write held back: the first put of a key under the prefix containing part
		// cycle takes and gives back the primitive, and leaves it open.
		cycle func(ctx context.Context, cli *clientv3.Client, prefix string) (closer, error)
	}{
		{"lock", "/", func(ctx context.Context, cli *clientv3.Client, prefix string) (closer, error) {
			l, err := NewLock(cli, prefix)
			if err != nil {
				return nil, err
			}
			if _, err := l.Lock(ctx); err != nil {
				return l, err
			}
			return l, l.Unlock(ctx)
		}},
		{"lock, key deleted by another", "/", func(ctx context.Context, cli *clientv3.Client, prefix string) (closer, error) {
			// The hold ends with Lost, its key deleted by someone else,
			// not by a release.
			l, err := NewLock(cli, prefix)
			if err != nil {
				return nil, err
			}
			events := l.Subscribe(ctx)
			g, err := l.Lock(ctx)
			if err != nil {
				return l, err
			}
			if _, err := cli.KV.(*hookedKV).KV.Delete(ctx, g.Key); err != nil {
				return l, err
			}
			for ev := range events {
				if _, ok := ev.(primitives.Lost); ok {
					return l, nil
				}
			}
			return l, errors.New("no Lost after the key's deletion")
		}},
		{"double barrier, key deleted by another", "/waiters/", func(ctx context.Context, cli *clientv3.Client, prefix string) (closer, error) {
			// The party's key is deleted by someone else; Leave finds it
			// gone.
			d, err := NewDoubleBarrier(cli, prefix, 1)
			if err != nil {
				return nil, err
			}
			if err := d.Enter(ctx); err != nil {
				return d, err
			}
			if _, err := cli.KV.(*hookedKV).KV.Delete(ctx, prefix+"/waiters/", clientv3.WithPrefix()); err != nil {
				return d, err
			}
			if err := d.Leave(ctx); err != nil && !errors.Is(err, primitives.ErrLost) {
				return d, err
			}
			return d, nil
		}},
		{"semaphore", "/q/", func(ctx context.Context, cli *clientv3.Client, prefix string) (closer, error) {
			m, err := NewSemaphore(cli, prefix, 2)
			if err != nil {
				return nil, err
			}
			g, err := m.Acquire(ctx)
			if err != nil {
				return m, err
			}
			return m, m.Release(ctx, g)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			prefix := "/test/late/" + t.Name()
			cli := etcdtest.NewClient(t)
			var held atomic.Int32
			kv := &hookedKV{KV: cli.KV, hold: func(then []clientv3.Op) bool {
				return slices.ContainsFunc(then, func(op clientv3.Op) bool {
					key := string(op.KeyBytes())
					return op.IsPut() && strings.HasPrefix(key, prefix+"/") && strings.Contains(key[len(prefix):], c.part)
				}) && held.CompareAndSwap(0, 1)
			}}
			cli.KV = kv
			clean := etcdtest.NewClient(t)
			p, err := c.cycle(ctx, cli, prefix)
			if p != nil {
				defer p.Close() // the session lives until the end
			}
			if err != nil {
				t.Fatalf("a cycle whose first write was given up: %v", err)
			}
			late := kv.takeHeld()
			if len(late) != 1 {
				t.Fatalf("%d writes held back, want 1", len(late))
			}
			put := late[0].then[slices.IndexFunc(late[0].then, clientv3.Op.IsPut)]
			key := string(put.KeyBytes())
			resp, err := late[0].send(ctx, clean)
			if err != nil {
				t.Fatal(err)
			}
			if !resp.Succeeded {
				t.Fatalf("the late write of %s found its key: it did not land", key)
			}
			for {
				got, err := clean.Get(ctx, key)
				if err != nil {
					t.Fatalf("%s, written late under the session's lease, still there (%v): it blocks the name until the session ends", key, err)
				}
				if len(got.Kvs) == 0 {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestRepeatAfterCompaction: a Lock whose write landed but whose answer was
// lost keeps the key its repeat finds only if it can read what the landed
// write read (the key ahead, at the revision before its own). If etcd has
// compacted that revision meanwhile, the key is deleted and written anew
// under a new name: Lock succeeds, with the token of the key it keeps, and
// nothing else is left. (Its own etcd: the compaction would cut other
// tests' history reads.)
func TestRepeatAfterCompaction(t *testing.T) {
	c, err := embedded.StartCluster(1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newClient := func() *clientv3.Client {
		cli, err := c.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	cli, clean := newClient(), newClient()
	const prefix = "/test/compacted"
	var lostKey atomic.Value
	cli.KV = &hookedKV{KV: cli.KV, commit: func(then []clientv3.Op, resp *clientv3.TxnResponse, err error) (*clientv3.TxnResponse, error) {
		i := slices.IndexFunc(then, func(op clientv3.Op) bool { return op.IsPut() && strings.HasPrefix(string(op.KeyBytes()), prefix+"/") })
		if err != nil || i < 0 || !lostKey.CompareAndSwap(nil, string(then[i].KeyBytes())) {
			return resp, err
		}
		if _, err := clean.Compact(ctx, resp.Header.Revision); err != nil {
			t.Errorf("compact: %v", err)
		}
		return nil, rpctypes.ErrTimeout
	}}
	l, err := NewLock(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock whose landed write's read was compacted: %v", err)
	}
	first, _ := lostKey.Load().(string)
	if first == "" {
		t.Fatal("no answer lost")
	}
	keys, err := clean.Get(ctx, prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.Kvs) != 1 || string(keys.Kvs[0].Key) == first || keys.Kvs[0].CreateRevision != int64(g.FencingToken) {
		t.Fatalf("keys %v after a Lock with token %d, want one, not %s, created at the token", keys.Kvs, g.FencingToken, first)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := clean.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || left.Count != 0 {
		t.Fatalf("%v keys left (%v)", left, err)
	}
}

// TestReadyLandedAfterTheCallerGaveUp: the party that completes a double
// barrier's count writes ready; if that write lands but its caller gives
// up before the answer (or the answer is lost), the others pass the
// barrier, so this party has entered too: its Enter returns nil and it
// stays counted. Before, it withdrew its key and returned its context's
// error while the others went through.
func TestReadyLandedAfterTheCallerGaveUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := "/test/ready/" + t.Name()
	clean := etcdtest.NewClient(t)
	cli := etcdtest.NewClient(t)
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	cli.KV = &hookedKV{KV: cli.KV, commit: func(then []clientv3.Op, resp *clientv3.TxnResponse, err error) (*clientv3.TxnResponse, error) {
		if err == nil && slices.ContainsFunc(then, func(op clientv3.Op) bool { return op.IsPut() && string(op.KeyBytes()) == prefix+"/ready" }) {
			bcancel() // the caller gives up as the write lands
			return nil, rpctypes.ErrTimeout
		}
		return resp, err
	}}
	a, err := NewDoubleBarrier(clean, prefix, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewDoubleBarrier(cli, prefix, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	aIn := make(chan error, 1)
	go func() { aIn <- a.Enter(ctx) }()
	for {
		resp, err := clean.Get(ctx, prefix+"/waiters/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.Enter(bctx); err != nil {
		t.Fatalf("Enter whose ready landed as its caller gave up: %v", err)
	}
	if err := <-aIn; err != nil {
		t.Fatal(err)
	}
	for _, d := range []interface{ Leave(context.Context) error }{a, b} {
		go func() { _ = d.Leave(ctx) }()
	}
}
