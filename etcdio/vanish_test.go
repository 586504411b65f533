package etcdio_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
)

// A waiter's key can vanish (deleted by another client, alone or together
// with the blocker ahead of it) and its caller can give up at any step of
// its wait: before its watch opens, while a look is in flight, after. Each
// time the process lives, the waiting Lock returns the right error
// promptly (ErrLost for a vanished key, exactly ctx.Err() for a cancelled
// call), and nothing is left under the prefix but the holder's key. The
// holder is a disco lock or etcd's Mutex: both are the same queue.
func TestWaiterKeyVanishesAtEveryStep(t *testing.T) {
	testkit.NoLeaks(t)
	const rounds = 8
	cases := []struct {
		name string
		step step
		// fault hurts the waiting caller, whose key is mine, queued behind
		// blocker; cancel ends its Lock's context.
		fault func(t *testing.T, cli *clientv3.Client, mine, blocker string, cancel context.CancelFunc)
		want  func(err error) bool
	}{
		{"deleted before its watch opens", beforeWatch, deleteKeys(false), isLost},
		{"deleted with its blocker before its watch opens", beforeWatch, deleteKeys(true), isLost},
		{"deleted while its loop is stopped", loopStopped, deleteKeys(false), isLost},
		{"deleted with its blocker while its loop is stopped", loopStopped, deleteKeys(true), isLost},
		{"deleted while it waits", waiting, deleteKeys(false), isLost},
		{"deleted with its blocker while it waits", waiting, deleteKeys(true), isLost},
		{"cancelled before its watch opens", beforeWatch, cancelWait, isCanceled},
		{"cancelled while its loop is stopped", loopStopped, cancelWait, isCanceled},
		{"cancelled while it waits", waiting, cancelWait, isCanceled},
	}
	for _, c := range cases {
		for _, holderKind := range []string{"disco", "mutex"} {
			t.Run(c.name+"/"+holderKind, func(t *testing.T) {
				for i := range rounds {
					waiterVanishes(t, fmt.Sprintf("%s/%d", prefixOf(t), i), holderKind, c.step, c.fault, c.want)
				}
			})
		}
	}
}

// step is when, in the waiter's wait, the fault lands.
type step int

const (
	// beforeWatch: the waiter's loop stopped after its key was written,
	// before it opened the watch of its blocker.
	beforeWatch step = iota
	// loopStopped: the watch is open, then the loop stops, so the fault's
	// events reach the watch's helper (and its look) while the loop that
	// would withdraw the waiter cannot run.
	loopStopped
	// waiting: the watch is open and the loop runs.
	waiting
)

// vanishTTL is the waiters' TTL in TestWaiterKeyVanishesAtEveryStep.
const vanishTTL = 2 * time.Second

func isLost(err error) bool     { return errors.Is(err, primitives.ErrLost) }
func isCanceled(err error) bool { return err == context.Canceled }

// deleteKeys deletes the waiter's key, and with blocker the key ahead of it
// in the same transaction (so the waiter's watch sees its blocker go at the
// revision its own key went).
func deleteKeys(withBlocker bool) func(*testing.T, *clientv3.Client, string, string, context.CancelFunc) {
	return func(t *testing.T, cli *clientv3.Client, mine, blocker string, _ context.CancelFunc) {
		t.Helper()
		ops := []clientv3.Op{clientv3.OpDelete(mine)}
		if withBlocker {
			ops = append(ops, clientv3.OpDelete(blocker))
		}
		if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

func cancelWait(_ *testing.T, _ *clientv3.Client, _, _ string, cancel context.CancelFunc) { cancel() }

func waiterVanishes(t *testing.T, prefix, holderKind string, at step,
	fault func(*testing.T, *clientv3.Client, string, string, context.CancelFunc), want func(error) bool) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	cli := newClient(t)
	var blocker string
	switch holderKind {
	case "disco":
		g := mustLock(t, newLock(t, cli, prefix))
		blocker = g.Key
	default:
		m := concurrency.NewMutex(etcdSession(t, cli), prefix)
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Unlock(context.Background()) })
		blocker = m.Key()
	}
	wcli := newClient(t)
	watching := watchesOf(wcli, blocker)
	// A short TTL: a key deleted alone is noticed from the watch of the
	// session's own keys, which a wait opens after a quarter of the TTL.
	s := testkit.ClosedAtEnd[*etcdio.Session](t)(etcdio.NewSession(wcli, etcdio.WithTTL(vanishTTL)))
	waiter := newLock(t, wcli, prefix, etcdio.WithSession(s))
	resume := make(chan struct{})
	if at == beforeWatch {
		// The loop stops at its next step: Lock writes the key on the
		// caller's goroutine, then waits for the loop to watch.
		testhook.PauseSession(s, resume)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(wctx)
		got <- err
	}()
	var mine string
	testkit.Eventually(t, 5*time.Second, "the waiter's key", func() bool {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if string(kv.Key) != blocker {
				mine = string(kv.Key)
			}
		}
		return mine != ""
	})
	if at != beforeWatch {
		select {
		case <-watching:
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter never watched its blocker")
		}
	}
	if at == loopStopped {
		// The loop stops at its next wake-up: the fault's first message.
		testhook.PauseSession(s, resume)
	}
	fault(t, cli, mine, blocker, cancel)
	close(resume)
	select {
	case err := <-got:
		if !want(err) {
			t.Fatalf("waiting Lock returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiting Lock still waiting 5s after the fault")
	}
	testkit.Eventually(t, 5*time.Second, "only the holder's key left", func() bool {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if string(kv.Key) != blocker {
				return false
			}
		}
		return true
	})
}

// watchesOf makes cli's watches observable: the returned channel is closed
// once etcd has confirmed a watch that covers key (of the key, or of a
// prefix of it: a waiter watches its blocker's session's keys) and the
// watcher has been handed the confirmation, so every change to key from
// then on reaches it.
func watchesOf(cli *clientv3.Client, key string) <-chan struct{} {
	w := &confirmingWatcher{Watcher: cli.Watcher, key: key, confirmed: make(chan struct{})}
	cli.Watcher = w
	return w.confirmed
}

type confirmingWatcher struct {
	clientv3.Watcher
	key       string
	once      sync.Once
	confirmed chan struct{}
}

func (w *confirmingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, opts...)
	if !strings.HasPrefix(w.key, key) {
		return in
	}
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			select {
			case out <- wr:
			case <-ctx.Done():
				return
			}
			if wr.Created {
				w.once.Do(func() { close(w.confirmed) })
			}
		}
	}()
	return out
}
