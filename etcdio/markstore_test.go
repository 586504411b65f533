package etcdio_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/storetest"
	"github.com/ahrtr/disco/internal/testkit"
)

// dropPrefix removes the keys under prefix when t ends, so tests leave
// nothing in a cluster given by ETCD_ENDPOINTS.
func dropPrefix(t *testing.T, prefix string) {
	cli := newClient(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = cli.Delete(ctx, prefix, clientv3.WithPrefix())
	})
}

func TestMarkStoreLaws(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t) + "/"
	dropPrefix(t, prefix)
	s, err := etcdio.NewMarkStore(newClient(t), prefix)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, s, "")
}

// TestMarkStoreCrash: a process raising marks in etcd is killed mid-raise;
// a guard rebuilt on etcd rejects the zombie's token.
func TestMarkStoreCrash(t *testing.T) {
	env := []string{"ETCD_ENDPOINTS=" + strings.Join(etcdtest.Endpoints(), ",")}
	prefix := "/test/" + t.Name() + "/"
	if !storetest.IsChild() {
		dropPrefix(t, prefix)
	}
	storetest.Crash(t, prefix, env, openMarkStore)
}

// openMarkStore opens a MarkStore on prefix with a client of its own.
func openMarkStore(prefix string) (guard.MarkStore, func(), error) {
	cli, err := embedded.NewClient(etcdtest.Endpoints())
	if err != nil {
		return nil, nil, err
	}
	s, err := etcdio.NewMarkStore(cli, prefix)
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return s, func() { cli.Close() }, nil
}

// TestMarkStoreFleet: two and three guards (each with its own client, and
// in other processes) share the marks in etcd and fence as one resource.
func TestMarkStoreFleet(t *testing.T) {
	env := []string{"ETCD_ENDPOINTS=" + strings.Join(etcdtest.Endpoints(), ",")}
	prefix := "/test/" + t.Name() + "/"
	if !storetest.IsChild() {
		testkit.NoLeaks(t)
		dropPrefix(t, prefix)
	}
	storetest.Fleet(t, prefix, env, openMarkStore)
}

func TestMarkStoreBadInput(t *testing.T) {
	if _, err := etcdio.NewMarkStore(nil, "/x/"); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := etcdio.NewMarkStore(newClient(t), ""); err == nil {
		t.Error("empty prefix accepted")
	}
}

// TestMarkStoreBoundsRequests: with etcd unreachable (the link to it holds
// every byte), a Load or Raise whose context has no deadline ends within the
// store's request timeout with an error wrapping context.DeadlineExceeded.
// Once the link carries bytes again, the store works.
func TestMarkStoreBoundsRequests(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t) + "/"
	dropPrefix(t, prefix)
	cli, px := etcdtest.NewProxiedClient(t)
	const bound = 500 * time.Millisecond
	s, err := etcdio.NewMarkStore(cli, prefix, etcdio.WithMarkStoreTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Raise(ctx, "/a", 3); err != nil {
		t.Fatal(err)
	}
	px.PauseTx()
	plain, err := etcdio.NewMarkStore(cli, prefix) // DefaultMarkStoreTimeout
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what  string
		bound time.Duration
		f     func() error
	}{
		{"Load", bound, func() error { _, err := s.Load(ctx, "/a"); return err }},
		{"Raise", bound, func() error { return s.Raise(ctx, "/a", 4) }},
		{"Load with the default timeout", etcdio.DefaultMarkStoreTimeout, func() error { _, err := plain.Load(ctx, "/a"); return err }},
	} {
		ch := make(chan error, 1)
		start := time.Now()
		go func() { ch <- c.f() }()
		select {
		case err := <-ch:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s with etcd unreachable: %v, want an error wrapping context.DeadlineExceeded", c.what, err)
			}
		case <-time.After(c.bound + 2*time.Second):
			px.UnpauseTx()
			<-ch
			t.Fatalf("%s with no deadline, etcd unreachable: still waiting after %v (bound %v)", c.what, time.Since(start).Round(time.Millisecond), c.bound)
		}
	}
	px.UnpauseTx()
	if err := s.Raise(ctx, "/a", 5); err != nil {
		t.Fatalf("Raise once etcd is reachable again: %v", err)
	}
	if m, err := s.Load(ctx, "/a"); err != nil || m < 5 {
		t.Fatalf("Load once etcd is reachable again: %d, %v; want at least 5", m, err)
	}
}

// A key that holds no mark is the store's failure, not the client's token:
// Load and Raise fail with an error that names the key and wraps none of
// fencing's token errors, so a guard answers 503, not 400 "malformed".
func TestMarkStoreCorruptMark(t *testing.T) {
	prefix := prefixOf(t) + "/"
	dropPrefix(t, prefix)
	cli := newClient(t)
	s, err := etcdio.NewMarkStore(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 10*time.Second)
	if _, err := cli.Put(ctx, prefix+"orders", "garbage"); err != nil {
		t.Fatal(err)
	}
	_, lerr := s.Load(ctx, "orders")
	rerr := s.Raise(ctx, "orders", 7)
	for call, err := range map[string]error{"Load": lerr, "Raise": rerr} {
		if err == nil || !strings.Contains(err.Error(), "does not hold a mark") ||
			errors.Is(err, fencing.ErrNoToken) || errors.Is(err, fencing.ErrMalformedToken) {
			t.Errorf("%s of a corrupt mark: %v; want an error saying the key holds no mark, wrapping no token error", call, err)
		}
	}
}
