// Command election runs disco's leader election on a real kube-apiserver
// started in this process (on an embedded etcd), and tells the story with
// the tokens:
//
//  1. three disco candidates campaign on one Lease; one leads, and a
//     guarded resource admits its token;
//  2. the leader is cut off from the API server: it is Suspended, then Lost
//     at its deadline; another candidate leads after the lease duration,
//     with a higher token, and the guard rejects the old leader's late
//     write;
//  3. the new leader resigns and a client-go leaderelection candidate takes
//     the Lease: disco's observer reports it, with no token;
//  4. client-go's leader releases the Lease and the last disco candidate
//     leads with a token above every earlier one.
//
// It exits 0 only if the story ended as promised.
//
//	go run ./examples/election    (in k8sio/e2e)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/k8sio/e2e/apiserver"
	"github.com/ahrtr/disco/k8sio/e2e/faults"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

const (
	namespace = "default"
	lease     = "scheduler"
	ttl       = 2 * time.Second
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "election:", err)
		os.Exit(1)
	}
}

type node struct {
	name string
	link *faults.Link
	e    election.Service
}

func run(out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	apiserver.Quiet()
	say("starting kube-apiserver (Kubernetes 1.37) on an embedded etcd...")
	srv, stop, err := apiserver.StartProcess()
	if err != nil {
		return err
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var nodes []*node
	for i := 1; i <= 3; i++ {
		n := &node{name: fmt.Sprintf("node-%d", i), link: faults.New()}
		cs, err := srv.Client(n.link.Wrap)
		if err != nil {
			return err
		}
		if n.e, err = k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(ttl), k8sio.WithIdentity(n.name)); err != nil {
			return err
		}
		defer n.e.Close()
		nodes = append(nodes, n)
	}
	won := make(chan *node, len(nodes))
	for _, n := range nodes {
		go func() {
			if n.e.Campaign(ctx, n.name) == nil {
				won <- n
			}
		}()
	}
	gd := guard.New()
	first := <-won
	t1, _ := first.e.Term()
	if err := gd.Check(t1.Token()); err != nil {
		return err
	}
	say("1. %s leads the Lease %s/%s with token %d; the resource admits it", first.name, namespace, lease, t1.Token())

	events := first.e.Subscribe(ctx)
	first.link.Cut()
	say("2. %s is cut off from the API server", first.name)
	for ev := range events {
		switch ev := ev.(type) {
		case primitives.Suspended:
			say("   %s: Suspended, its term may end at %s", first.name, ev.Deadline.Format("15:04:05.000"))
		case primitives.Lost:
			say("   %s: Lost at its deadline", first.name)
		}
		if _, lost := ev.(primitives.Lost); lost {
			break
		}
	}
	second := <-won
	t2, _ := second.e.Term()
	if t2.Token() <= t1.Token() {
		return fmt.Errorf("token %d after %d", t2.Token(), t1.Token())
	}
	if err := gd.Check(t2.Token()); err != nil {
		return err
	}
	say("   %s leads with token %d after the lease duration", second.name, t2.Token())
	if err := gd.Check(t1.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		return fmt.Errorf("the old leader's late write was not rejected: %v", err)
	}
	say("   %s's late write with token %d is rejected: %v", first.name, t1.Token(), gd.Check(t1.Token()))

	// A client-go candidate joins; the disco leader resigns.
	var last *node
	for _, n := range nodes {
		if n != first && n != second {
			last = n
		}
	}
	last.e.Close() // campaigns again below, after client-go
	cs, err := srv.Client(nil)
	if err != nil {
		return err
	}
	started := make(chan struct{})
	goCtx, goStop := context.WithCancel(ctx)
	defer goStop()
	goDone := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: namespace, Name: lease},
			Client: cs.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go-1"}},
		LeaseDuration: ttl, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond, ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) { close(started) }, OnStoppedLeading: func() {}},
	})
	if err != nil {
		return err
	}
	go func() { defer close(goDone); le.Run(goCtx) }()
	if err := second.e.Resign(ctx); err != nil {
		return err
	}
	<-started
	ld, err := second.e.Leader(ctx)
	if err != nil || ld.Value != "client-go-1" || ld.Token() != 0 {
		return fmt.Errorf("a disco observer sees %+v, %v; want client-go-1 with no token", ld, err)
	}
	say("3. %s resigned; client-go's candidate leads; disco reports it as %q with token %d (none: a guard refuses its requests)", second.name, ld.Value, ld.Token())

	lastCS, err := srv.Client(nil)
	if err != nil {
		return err
	}
	e, err := k8sio.NewElection(lastCS, namespace, lease, k8sio.WithTTL(ttl), k8sio.WithIdentity(last.name))
	if err != nil {
		return err
	}
	defer e.Close()
	lastWon := make(chan error, 1)
	go func() { lastWon <- e.Campaign(ctx, last.name) }()
	goStop()
	<-goDone
	if err := <-lastWon; err != nil {
		return err
	}
	t3, _ := e.Term()
	if err := gd.Check(t3.Token()); err != nil {
		return err
	}
	say("4. client-go's leader released the Lease; %s leads with token %d, above %d and %d", last.name, t3.Token(), t1.Token(), t2.Token())
	return e.Resign(ctx)
}
