package safety

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio/embedded"
)

// leakPatience bounds how long TestMain waits for goroutines to end after
// the cluster is closed: etcd's idle peer connections end only when the
// peer listener's 5s read timeout fires (see embedded.Cluster.Close).
const leakPatience = 20 * time.Second

// The cluster is shared by every test of the binary: started on first use,
// closed by TestMain. Tests restore it (all members running, no faults)
// before they finish.
var shared struct {
	once    sync.Once
	err     error
	c       *embedded.Cluster
	obs     []*clientv3.Client // one client per member, through its proxy only
	all     *clientv3.Client   // a client of every member
	started time.Duration
}

func TestMain(m *testing.M) {
	code := m.Run()
	if err := closeCluster(); err != nil {
		fmt.Fprintln(os.Stderr, "safety: closing the cluster:", err)
		code = 1
	}
	if code == 0 {
		start := time.Now()
		deadline := start.Add(leakPatience)
		for {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintln(os.Stderr, "safety: goroutines leaked:", err)
				code = 1
				break
			}
		}
		if testing.Verbose() {
			fmt.Printf("goroutines settled %v after the tests\n", time.Since(start).Round(time.Millisecond))
		}
	}
	os.Exit(code)
}

// cluster returns the shared cluster, starting it if needed.
func cluster(t testing.TB) *embedded.Cluster {
	t.Helper()
	shared.once.Do(func() {
		start := time.Now()
		c, err := embedded.StartCluster(3, embedded.WithUnsafeNoFsync())
		if err != nil {
			shared.err = err
			return
		}
		shared.c = c
		for _, mb := range c.Members() {
			cli, err := mb.NewClient()
			if err != nil {
				shared.err = err
				return
			}
			shared.obs = append(shared.obs, cli)
		}
		if shared.all, shared.err = c.NewClient(); shared.err != nil {
			return
		}
		shared.started = time.Since(start)
	})
	if shared.err != nil {
		t.Fatalf("starting the cluster: %v", shared.err)
	}
	return shared.c
}

func closeCluster() error {
	for _, cli := range shared.obs {
		cli.Close()
	}
	if shared.all != nil {
		shared.all.Close()
	}
	return shared.c.Close() // nil-safe
}

// observer returns a client that reaches only member i: the nemesis reads
// etcd through a member it has not cut off.
func observer(i int) *clientv3.Client { return shared.obs[i] }

// restoreCluster undoes every fault: all members running, no blackhole, no
// delay, and an agreed leader.
func restoreCluster(t testing.TB, c *embedded.Cluster) {
	t.Helper()
	if err := restore(c); err != nil {
		t.Fatal(err)
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// eventually polls cond until it holds or d passes, and reports which.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}
