package rwlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// DoWrite holds the write lock for the duration of a function: nobody else
// reads or writes meanwhile.
func ExampleDoWrite() {
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

	writer, err := etcdio.NewRWLock(cli, "/example/rwlock")
	if err != nil {
		log.Fatal(err)
	}
	defer writer.Close()
	reader, err := etcdio.NewRWLock(cli, "/example/rwlock")
	if err != nil {
		log.Fatal(err)
	}
	defer reader.Close()

	ctx := context.Background()
	err = rwlock.DoWrite(ctx, writer, func(ctx context.Context, g rwlock.Grant) error {
		fmt.Println("mode:", g.Mode)
		_, err := reader.TryRLock(ctx)
		fmt.Println("readers kept out:", errors.Is(err, rwlock.ErrRWLockTaken))
		return nil
	})
	fmt.Println("DoWrite returned:", err)

	// Output:
	// mode: write
	// readers kept out: true
	// DoWrite returned: <nil>
}

// DoRead holds a read lock for the duration of a function. Readers holding
// at the same time share one fencing token, so a guard lets all of them in.
func ExampleDoRead() {
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

	r1, err := etcdio.NewRWLock(cli, "/example/rwlock")
	if err != nil {
		log.Fatal(err)
	}
	defer r1.Close()
	r2, err := etcdio.NewRWLock(cli, "/example/rwlock")
	if err != nil {
		log.Fatal(err)
	}
	defer r2.Close()

	ctx := context.Background()
	err = rwlock.DoRead(ctx, r1, func(ctx context.Context, g1 rwlock.Grant) error {
		// A second reader gets in while the first one holds.
		return rwlock.DoRead(ctx, r2, func(ctx context.Context, g2 rwlock.Grant) error {
			fmt.Println("mode:", g2.Mode)
			fmt.Println("both hold, one token:", g1.Token() == g2.Token())
			return nil
		})
	})
	fmt.Println("DoRead returned:", err)

	// Output:
	// mode: read
	// both hold, one token: true
	// DoRead returned: <nil>
}
