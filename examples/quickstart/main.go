// Command quickstart is the README's first program: a lock whose token a
// guarded resource checks, on an etcd started in the process (or the
// cluster ETCD_ENDPOINTS names). Run it with
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives/lock"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	// An etcd for this program: ETCD_ENDPOINTS's cluster, or one member
	// started here.
	endpoints, stop, err := embedded.StartOrEnv()
	if err != nil {
		return err
	}
	defer stop()
	cli, err := embedded.NewClient(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()

	// The resource's side: it admits a token only if no higher one came
	// before it.
	g := guard.New()

	// Two owners of one lock, as two processes would be.
	first, err := etcdio.NewLock(cli, "/quickstart/orders")
	if err != nil {
		return err
	}
	defer first.Close()
	second, err := etcdio.NewLock(cli, "/quickstart/orders")
	if err != nil {
		return err
	}
	defer second.Close()

	// The first owner writes under the lock with its token.
	var old lock.Grant
	err = lock.Do(ctx, first, func(ctx context.Context, gr lock.Grant) error {
		old = gr
		fmt.Fprintln(os.Stdout, "first owner writes with token", gr.Token(), "->", g.Check(gr.Token()))
		return nil
	})
	if err != nil {
		return err
	}
	// The second owner takes the lock next, with a higher token.
	err = lock.Do(ctx, second, func(ctx context.Context, gr lock.Grant) error {
		fmt.Fprintln(os.Stdout, "second owner writes with token", gr.Token(), "->", g.Check(gr.Token()))
		return nil
	})
	if err != nil {
		return err
	}
	// A late write of the first owner (it was paused, say) is refused.
	late := g.Check(old.Token())
	fmt.Fprintln(os.Stdout, "first owner's late write with token", old.Token(), "->", late)
	if late == nil {
		return fmt.Errorf("the guard admitted a stale token")
	}
	return nil
}
