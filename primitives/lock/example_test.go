package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// Do holds the lock for the duration of a function. Attach the grant's token
// to every request made inside it, so that the resource can reject a former
// holder (see package fencing/guard).
func ExampleDo() {
	// An in-process etcd server, for the example; a real program dials its
	// cluster.
	srv, err := embedded.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	l, err := etcdio.NewLock(cli, "/example/lock")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	ctx := context.Background()
	err = lock.Do(ctx, l, func(ctx context.Context, g lock.Grant) error {
		// ctx is cancelled if the lock is lost while we work.
		fmt.Println("acquired:", g.Token() > 0)
		return nil
	})
	fmt.Println("Do returned:", err)

	// Do released the lock, so another owner gets it at once.
	other, err := etcdio.NewLock(cli, "/example/lock")
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	g, err := other.TryLock(ctx)
	fmt.Println("free again:", err == nil)
	_ = other.Release(ctx, g)

	// Output:
	// acquired: true
	// Do returned: <nil>
	// free again: true
}

// Subscribe reports this owner's events as they happen: here one goroutine
// holds the lock while another follows its Acquired and Released events.
func Example_subscribe() {
	srv, err := embedded.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	l, err := etcdio.NewLock(cli, "/example/lock")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	eg, ctx := errgroup.WithContext(context.Background())
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Subscribe before acquiring: every later event is delivered.
	events := l.Subscribe(ctx)

	eg.Go(func() error { // the owner
		g, err := l.Lock(ctx)
		if err != nil {
			return err
		}
		return l.Release(ctx, g)
	})
	eg.Go(func() error { // the watcher
		for {
			select {
			case e, ok := <-events:
				if !ok {
					return errors.New("events ended")
				}
				switch e := e.(type) {
				case primitives.Acquired:
					fmt.Println("acquired, with a token:", e.Token > 0)
				case primitives.Released:
					fmt.Println("released")
					return nil
				case primitives.Lost:
					return e.Err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	if err := eg.Wait(); err != nil {
		fmt.Println("error:", err)
	}

	// Output:
	// acquired, with a token: true
	// released
}

// Supervise runs a singleton worker: one process at a time runs fn under the
// lock. When its hold is lost (here its lease is revoked, as a pause past the
// TTL would end it), Supervise builds a new service after a backoff and runs
// fn again with a higher token; when fn returns nil, the work is done.
func ExampleSupervise() {
	srv, err := embedded.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	newService := func(ctx context.Context) (lock.Service, error) {
		return etcdio.NewLock(cli, "/example/singleton", etcdio.WithContext(ctx))
	}
	var tokens []fencing.Token
	err = lock.Supervise(context.Background(), newService, func(ctx context.Context, g lock.Grant) error {
		tokens = append(tokens, g.Token())
		if len(tokens) == 1 {
			// Simulate a crash of this worker's session (on a ctx of its
			// own: the loss it causes ends the hold's ctx).
			if _, err := cli.Revoke(context.WithoutCancel(ctx), clientv3.LeaseID(g.LeaseID)); err != nil {
				return err
			}
			<-ctx.Done() // the hold is lost: stop working
			return ctx.Err()
		}
		return nil // the work is done
	}, lock.WithBackoff(10*time.Millisecond, time.Second))
	fmt.Println("Supervise returned:", err)
	fmt.Println("holds:", len(tokens), "with rising tokens:", tokens[1] > tokens[0])

	// Output:
	// Supervise returned: <nil>
	// holds: 2 with rising tokens: true
}
