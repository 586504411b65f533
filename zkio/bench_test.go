package zkio_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// Benchmarks on the shared loopback ZooKeeper server. Each reports the
// median and p99 of one operation beside the rate:
//
//	go test -run XXX -bench . -benchtime 500x ./zkio/

func p50p99(b *testing.B, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	if len(d) == 0 {
		return
	}
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkLockUnlock: one owner, Lock then Unlock.
func BenchmarkLockUnlock(b *testing.B) {
	servers := startZooKeeper(b)
	l := testkit.ClosedAtEnd[lock.Service](b)(zkio.NewLock(servers, fmt.Sprint("/bench/lock", b.N), zkio.WithSessionTimeout(10*time.Second)))
	ctx := context.Background()
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := l.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	p50p99(b, d)
}

// BenchmarkCreateDelete: the floor, a plain ephemeral sequential create and
// delete by one client.
func BenchmarkCreateDelete(b *testing.B) {
	servers := startZooKeeper(b)
	conn := adminConn(b, servers)
	path := fmt.Sprint("/bench/floor", b.N)
	if _, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		b.Fatal(err)
	}
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		p, err := conn.Create(path+"/n-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		if err != nil {
			b.Fatal(err)
		}
		if err := conn.Delete(p, -1); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	p50p99(b, d)
}

// BenchmarkGoZKLock: go-zookeeper's own lock recipe (Curator's layout,
// without tokens or events), Lock then Unlock.
func BenchmarkGoZKLock(b *testing.B) {
	servers := startZooKeeper(b)
	l := zk.NewLock(adminConn(b, servers), fmt.Sprint("/bench/gozk", b.N), zk.WorldACL(zk.PermAll))
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := l.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	p50p99(b, d)
}

// BenchmarkHandoff: owners, each with its own session, take turns; b.N
// acquisitions in all. The latency is from one holder's Unlock call to the
// next holder's Lock return.
func BenchmarkHandoff(b *testing.B) {
	for _, owners := range []int{2, 8} {
		b.Run(fmt.Sprint(owners, "owners"), func(b *testing.B) {
			servers := startZooKeeper(b)
			path := fmt.Sprintf("/bench/handoff%d-%d", owners, b.N)
			var mu sync.Mutex
			var d []time.Duration
			var unlockedAt time.Time
			left := b.N
			var wg sync.WaitGroup
			ctx := context.Background()
			ls := make([]lock.Service, owners)
			for i := range ls {
				ls[i] = testkit.ClosedAtEnd[lock.Service](b)(zkio.NewLock(servers, path, zkio.WithSessionTimeout(10*time.Second)))
			}
			b.ResetTimer()
			for _, l := range ls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						if _, err := l.Lock(ctx); err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						if !unlockedAt.IsZero() {
							d = append(d, time.Since(unlockedAt))
						}
						left--
						done := left <= 0
						unlockedAt = time.Now()
						mu.Unlock()
						if err := l.Unlock(ctx); err != nil {
							b.Error(err)
							return
						}
						if done {
							return
						}
					}
				}()
			}
			// Every owner stops once the count is reached; waiters still
			// queued get their turn and stop too.
			wg.Wait()
			p50p99(b, d)
		})
	}
}

// BenchmarkElectionFailover: two candidates; the leader resigns, the other
// leads. The latency is from Resign's call to the next Campaign's return.
func BenchmarkElectionFailover(b *testing.B) {
	servers := startZooKeeper(b)
	path := fmt.Sprint("/bench/election", b.N)
	ctx := context.Background()
	es := []election.Service{
		testkit.ClosedAtEnd[election.Service](b)(zkio.NewElection(servers, path, zkio.WithSessionTimeout(10*time.Second))),
		testkit.ClosedAtEnd[election.Service](b)(zkio.NewElection(servers, path, zkio.WithSessionTimeout(10*time.Second))),
	}
	if err := es[0].Campaign(ctx, "0"); err != nil {
		b.Fatal(err)
	}
	admin := adminConn(b, servers)
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		leader, next := es[i%2], es[(i+1)%2]
		won := make(chan error, 1)
		go func() { won <- next.Campaign(ctx, "x") }()
		for { // wait until the next candidate has queued
			children, _, err := admin.Children(path)
			if err != nil {
				b.Fatal(err)
			}
			if len(children) == 2 {
				break
			}
			time.Sleep(100 * time.Microsecond) // polling interval
		}
		t0 := time.Now()
		if err := leader.Resign(ctx); err != nil {
			b.Fatal(err)
		}
		if err := <-won; err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	p50p99(b, d)
}
