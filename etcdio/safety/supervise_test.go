package safety

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// superviseTTL is the candidates' lease TTL: short, so a partition past it
// costs a few seconds.
const superviseTTL = 2 * time.Second

// started is one term as its fn saw it once the guard admitted it.
type started struct {
	who int
	l   election.Leadership
}

// Three supervised candidates, one per member, lead in turn while the
// leader keeps losing its session: its lease revoked, or its member cut off
// past the TTL. Over 10 rounds, no two terms are ever inside the guard at
// once, no candidate ever runs two terms at once, every term's token is
// above the one before it, and each candidate's own terms' tokens increase.
func TestSuperviseRejoinsUnderSessionLosses(t *testing.T) {
	c := cluster(t)
	defer restoreCluster(t, c)
	prefix := "/safety/supervise/" + t.Name()
	const candidates, rounds = 3, 10

	g := guard.New()
	var inside atomic.Int32 // terms inside the guard now
	var violations []string
	var mu sync.Mutex // guards violations, lastToken and causes
	violate := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		violations = append(violations, fmt.Sprintf(format, args...))
	}
	lastToken := make([]fencing.Token, candidates)
	causes := make(map[fencing.Token]error) // why each term's context ended
	starts := make(chan started, 4*rounds)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	results := make([]error, candidates)
	built := make([]atomic.Int32, candidates)
	for i := range candidates {
		cli := newClientOf(t, c.Member(i).NewClient)
		newService := func(ctx context.Context) (election.Service, error) {
			opts := []etcdio.Option{etcdio.WithTTL(superviseTTL), etcdio.WithContext(ctx)}
			if i == 0 {
				// One candidate stops at Suspended rather than at Lost.
				opts = append(opts, etcdio.WithCancelOnSuspend())
			}
			s, err := etcdio.NewElection(cli, prefix, opts...)
			if err == nil {
				built[i].Add(1)
			}
			return s, err
		}
		var running atomic.Int32 // this candidate's terms running fn now
		terms := int32(0)        // this candidate's terms so far
		fn := func(ctx context.Context, l election.Leadership) error {
			if n := running.Add(1); n != 1 {
				violate("candidate %d runs %d terms at once", i, n)
			}
			defer running.Add(-1)
			// Every term here ends with its session lost, so each one runs
			// on a new Service.
			if terms++; built[i].Load() != terms {
				violate("candidate %d: term %d runs on service %d", i, terms, built[i].Load())
			}
			mu.Lock()
			if l.Token() <= lastToken[i] {
				violations = append(violations, fmt.Sprintf("candidate %d: term token %d not above its previous %d", i, l.Token(), lastToken[i]))
			}
			lastToken[i] = l.Token()
			mu.Unlock()
			actx, done, err := g.Admit(ctx, l.Token())
			if err == nil {
				if n := inside.Add(1); n != 1 {
					violate("%d terms inside the guard at once (candidate %d, token %d)", n, i, l.Token())
				}
				starts <- started{who: i, l: l}
				<-actx.Done() // until the term ends or a later one is admitted
				inside.Add(-1)
				done()
			}
			// Superseded or not, the term is over only when its context
			// says so.
			<-ctx.Done()
			mu.Lock()
			causes[l.Token()] = context.Cause(ctx)
			mu.Unlock()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = election.Supervise(ctx, newService, fmt.Sprint("candidate-", i), fn,
				election.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
		}()
	}
	stopAll := func() {
		cancel()
		wg.Wait()
	}
	defer stopAll()

	next := func(after started) started {
		t.Helper()
		select {
		case s := <-starts:
			if s.l.Token() <= after.l.Token() {
				t.Fatalf("a term with token %d began after token %d", s.l.Token(), after.l.Token())
			}
			return s
		case <-time.After(20 * time.Second):
			t.Fatalf("no new term within 20s after token %d", after.l.Token())
			return started{}
		}
	}
	world := observer(0)
	cur := next(started{})
	type fault struct {
		started
		partition bool
	}
	var faults []fault
	for round := range rounds {
		// Three partitions: the leader changes every round, so they
		// usually fall on three different candidates.
		cut := round%4 == 1
		faults = append(faults, fault{cur, cut})
		if cut {
			// Cut the leader's member off past the TTL: its session is lost
			// without etcd telling it, and another candidate takes over.
			nx := func() started {
				defer partition(t, cur.who)() // heal, also if next fails
				return next(cur)
			}()
			if nx.who == cur.who {
				t.Fatalf("round %d: candidate %d led again while cut off", round, cur.who)
			}
			cur = nx
			continue
		}
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := observer((cur.who+1)%candidates).Revoke(rctx, clientv3.LeaseID(cur.l.LeaseID)); err != nil {
			rcancel()
			t.Fatalf("round %d: revoke: %v", round, err)
		}
		rcancel()
		cur = next(cur)
	}
	stopAll()
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	for i, err := range results {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("candidate %d: Supervise = %v, want context.Canceled", i, err)
		}
	}
	total := int32(0)
	for i := range built {
		total += built[i].Load()
		// Terms pass from candidate to candidate, so each one rejoined
		// after losing its session.
		if built[i].Load() < 2 {
			t.Errorf("candidate %d built %d services: it never rejoined", i, built[i].Load())
		}
	}
	if n := countUnder(t, world, prefix+"/"); n != 0 {
		t.Errorf("%d keys left under %s", n, prefix)
	}
	// Each faulted term ended with its loss; candidate 0, cut off, already
	// at Suspended.
	suspended := 0
	for _, f := range faults {
		cause := causes[f.l.Token()]
		want := primitives.ErrLost
		if f.partition && f.who == 0 {
			want = primitives.ErrSuspended
			suspended++
		}
		if !errors.Is(cause, want) {
			t.Errorf("candidate %d's term %d (partitioned: %v) ended with %v, want %v", f.who, f.l.Token(), f.partition, cause, want)
		}
	}
	t.Logf("%d rounds (partitions at rounds 1, 5, 9; %d ended at Suspended): %d services built, last token %d",
		rounds, suspended, total, cur.l.Token())
}
