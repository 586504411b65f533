package faultsuite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ahrtr/disco/internal/testhook"
)

// stats counts what happened in rounds.
type stats struct {
	rounds                                 int
	faults                                 map[string]int
	kinds                                  [numKinds]int
	httpAttempted, httpAccepted, httpStale int
	httpUnknown, reads                     int
	sqlAttempted, sqlAccepted, sqlStale    int
	sqlUnknown                             int
	holds, released, lostHolds             int
	zombiesChecked, zombieStale            int
	sessionErrors, acquireErrors           int
	sections, porcupineOps                 int
	porcupineTime, maxRecovery, faultTime  time.Duration
	closeErrors                            int
}

func (s *stats) add(o stats) {
	s.rounds += o.rounds
	for f, n := range o.faults {
		if s.faults == nil {
			s.faults = map[string]int{}
		}
		s.faults[f] += n
	}
	for i := range s.kinds {
		s.kinds[i] += o.kinds[i]
	}
	s.httpAttempted += o.httpAttempted
	s.httpAccepted += o.httpAccepted
	s.httpStale += o.httpStale
	s.httpUnknown += o.httpUnknown
	s.reads += o.reads
	s.sqlAttempted += o.sqlAttempted
	s.sqlAccepted += o.sqlAccepted
	s.sqlStale += o.sqlStale
	s.sqlUnknown += o.sqlUnknown
	s.holds += o.holds
	s.released += o.released
	s.lostHolds += o.lostHolds
	s.zombiesChecked += o.zombiesChecked
	s.zombieStale += o.zombieStale
	s.sessionErrors += o.sessionErrors
	s.acquireErrors += o.acquireErrors
	s.sections += o.sections
	s.porcupineOps += o.porcupineOps
	s.porcupineTime += o.porcupineTime
	s.maxRecovery = max(s.maxRecovery, o.maxRecovery)
	s.faultTime += o.faultTime
	s.closeErrors += o.closeErrors
}

func (s *stats) report(backend string, faults []Fault, seed uint64, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "safety report (%s): %d rounds in %v, seed %d (DISCO_SAFETY_SEED=%d reproduces the schedule)\n",
		backend, s.rounds, elapsed.Round(time.Second), seed, seed)
	fmt.Fprintf(&b, "  faults:     ")
	for _, f := range faults {
		fmt.Fprintf(&b, " %s %d", f.Name, s.faults[f.Name])
	}
	fmt.Fprintf(&b, " (%v under fault)\n  primitives: ", s.faultTime.Round(time.Second))
	for k := range numKinds {
		fmt.Fprintf(&b, " %s %d", k, s.kinds[k])
	}
	fmt.Fprintf(&b, "\n  holds: %d acquired, %d released, %d ended involuntarily (%d seized zombies checked)\n",
		s.holds, s.released, s.lostHolds, s.zombiesChecked)
	fmt.Fprintf(&b, "  HTTP register (guard.HTTPMiddleware): %d requests (%d reads), %d accepted, %d rejected as stale, %d unknown; %d critical sections\n",
		s.httpAttempted, s.reads, s.httpAccepted, s.httpStale, s.httpUnknown, s.sections)
	fmt.Fprintf(&b, "  SQLite register (token <= ?):         %d writes, %d accepted, %d rejected as stale, %d unknown\n",
		s.sqlAttempted, s.sqlAccepted, s.sqlStale, s.sqlUnknown)
	fmt.Fprintf(&b, "  zombie requests rejected as stale: %d\n", s.zombieStale)
	fmt.Fprintf(&b, "  porcupine: %d operations checked in %v, all linearizable\n", s.porcupineOps, s.porcupineTime.Round(time.Millisecond))
	fmt.Fprintf(&b, "  slowest recovery after healing: %v; transient errors: %d session, %d acquire, %d close\n",
		s.maxRecovery.Round(time.Millisecond), s.sessionErrors, s.acquireErrors, s.closeErrors)
	fmt.Fprintf(&b, "  result: nothing lost or accepted out of order; no overlapping critical sections; every zombie told before its next call")
	return b.String()
}

// round is one fault round: fresh prefix, fresh register, fresh clients.
type round struct {
	t      *testing.T
	c      Cluster
	n      int
	kind   kind
	fault  Fault
	seed   uint64
	rng    *rand.Rand
	ttl    time.Duration
	root   string // every key of the round is under it
	prefix string // the primitive's prefix
	clk    clock
	http   *httpRegister
	sql    *sqlRegister

	seizing   atomic.Bool  // the nemesis wants the next hold made
	seizeFrom atomic.Int64 // ... by a worker of this site (-1: any)
	seized    chan *victim // ... and gets it here

	mu       sync.Mutex
	httpOps  []op
	sqlOps   []op
	failures []string
	holdsAt  []int64 // when each hold was acquired
	st       stats
}

func (r *round) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *round) count(f func(*stats)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.st)
}

func (r *round) record(h, s *op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.httpOps = append(r.httpOps, *h)
	if s != nil {
		r.sqlOps = append(r.sqlOps, *s)
	}
}

func (r *round) acquired(_ int, _ int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holdsAt = append(r.holdsAt, r.clk.now())
	r.st.holds++
}

func (r *round) acquiredSince(t int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.holdsAt) > 0 && r.holdsAt[len(r.holdsAt)-1] > t
}

func (r *round) acceptedWrites() int {
	r.http.mu.Lock()
	defer r.http.mu.Unlock()
	return len(r.http.applied)
}

func (r *round) closeIncarnation(inc *incarnation) {
	err1 := inc.p.close()
	if err1 == nil {
		r.checkOwnedGone(inc)
	}
	err2 := inc.sess.Close()
	inc.cancel()
	<-inc.drained
	if err1 != nil || err2 != nil {
		r.count(func(s *stats) { s.closeErrors++ })
	}
}

// checkOwnedGone fails the round if keys of inc's session, still live, are
// left under the round's root once its primitive's Close has returned, for
// the TTL and a margin (a Close cut off from the store may hand its delete
// to the session's helpers, which repeat it while the session lives). See
// Owners.
func (r *round) checkOwnedGone(inc *incarnation) {
	o, ok := r.c.(Owners)
	if !ok || inc.sess.Err() != nil {
		return
	}
	lease := inc.sess.LeaseID()
	var keys []string
	var err error
	gone := func() bool {
		if inc.sess.Err() != nil {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err = o.Owned(ctx, r.root, lease)
		return err == nil && len(keys) == 0 // a failed listing shows nothing
	}
	wait := r.ttl + 3*time.Second
	if !eventually(wait, gone) {
		r.fail("keys of live session %#x left %v after its primitive's Close returned: %v (listing: %v)", lease, wait, keys, err)
	}
}

const workers = 3

// runRound runs one round and its checks, and returns its counts.
func runRound(t *testing.T, c Cluster, sq *sqlRegister, runID string, seed uint64, n int, k kind, f Fault) stats {
	t.Helper()
	restore(t, c)
	clk := clock{base: time.Now()}
	r := &round{
		t: t, c: c, n: n, kind: k, fault: f, seed: seed, ttl: c.TTL(),
		rng:    rand.New(rand.NewPCG(seed, uint64(n)<<8|0xff)),
		root:   fmt.Sprintf("/safety/%s/r%d/", runID, n),
		clk:    clk,
		http:   newHTTPRegister(clk),
		sql:    sq,
		seized: make(chan *victim, 1),
	}
	defer r.http.close()
	r.prefix = r.root + "res"
	sq.reset(t, clk)
	r.st.rounds = 1
	r.st.faults = map[string]int{f.Name: 1}
	r.st.kinds[k]++

	stop, stopAll := context.WithCancel(context.Background())
	defer stopAll()
	var wg sync.WaitGroup
	var clients []Client
	defer func() {
		for _, cli := range clients {
			cli.Close()
		}
	}()
	for i := range workers {
		site := i % c.Sites()
		cli, err := c.Dial(site)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, cli)
		w := &worker{r: r, id: i, site: site, cli: cli, rng: rand.New(rand.NewPCG(seed, uint64(n)<<8|uint64(i)))}
		wg.Go(func() { w.run(stop) })
	}

	// Let the workload get going, then break something.
	if !eventually(20*time.Second, func() bool { return r.acceptedWrites() >= 3 }) {
		r.fail("no progress before the fault")
	}
	faultStart := time.Now()
	heal := r.nemesis()
	r.count(func(s *stats) { s.faultTime = time.Since(faultStart) })

	// Progress after healing: someone acquires within the TTL plus a few seconds.
	if heal >= 0 {
		if !eventually(r.ttl+8*time.Second, func() bool { return r.acquiredSince(heal) }) {
			r.fail("no acquisition within %v after the fault healed", r.ttl+8*time.Second)
		}
		r.count(func(s *stats) { s.maxRecovery = time.Duration(r.firstHoldAfter(heal) - heal) })
	}
	// A little more work after recovery, then stop everyone.
	more := r.acceptedWrites() + 3
	eventually(5*time.Second, func() bool { return r.acceptedWrites() >= more })
	stopAll()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		t.Fatalf("round %d: workers did not stop within 60s", n)
	}

	r.checkKeysGone()
	r.check()
	if len(r.failures) > 0 {
		t.Errorf("%s round %d (%s, %s, seed %d) failed:\n  %s", c.Name(), n, k, f.Name, seed, strings.Join(r.failures, "\n  "))
	}
	return r.st
}

// firstHoldAfter returns when the first hold after t was acquired. Caller
// holds r.mu.
func (r *round) firstHoldAfter(t int64) int64 {
	for _, at := range r.holdsAt {
		if at > t {
			return at
		}
	}
	return t
}

// nemesis injects the round's fault, waits for its observable effect, heals
// it, and returns the (clock) time it healed, or -1 if it could not start.
func (r *round) nemesis() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := r.fault.Plan(ctx, r.rng)
	if err != nil {
		r.fail("%s: %v", r.fault.Name, err)
		return -1
	}
	var v *victim
	switch p.Seize {
	case VictimSoon:
		// Strike under a holder, if one holds soon, so that it becomes a zombie.
		v = r.seize(ctx, p.From, 5*time.Second)
	case Victim:
		if v = r.seize(ctx, p.From, 30*time.Second); v == nil {
			r.fail("%s: no hold to seize", r.fault.Name)
			return -1
		}
	}
	site, lease := p.From, int64(0)
	if v != nil {
		site, lease = v.w.site, v.h.lease
	}
	before := r.acceptedWrites()
	var resume chan struct{}
	if p.pause {
		resume = make(chan struct{})
		v.w.frozen.Store(&resume)
		testhook.PauseSession(v.inc.sess.Hook(), resume)
	}
	if err := p.Break(ctx, site, lease); err != nil {
		r.fail("%s: break %s: %v", r.fault.Name, p.Target, err)
	}
	switch p.While {
	case Progress:
		if !eventually(r.ttl+10*time.Second, func() bool { return r.acceptedWrites() >= before+5 }) {
			r.fail("%s: no progress while %s was broken", r.fault.Name, p.Target)
		}
		if v != nil {
			r.waitExpired(v)
		}
	case Expiry:
		r.waitExpired(v)
	case Outage:
		pace(ctx, r.ttl+time.Second)
	}
	if p.pause {
		v.w.frozen.Store(nil)
		close(resume)
	}
	if err := p.Heal(ctx); err != nil {
		r.fail("%s: heal %s: %v", r.fault.Name, p.Target, err)
	}
	if p.While == Outage && v != nil {
		r.waitExpired(v)
	}
	return r.healed(ctx, v)
}

// seize makes the next hold of worker from (any worker if -1) a victim, and
// returns it, or nil if there is none within d.
func (r *round) seize(ctx context.Context, from int, d time.Duration) *victim {
	r.seizeFrom.Store(int64(from))
	r.seizing.Store(true)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-r.seized:
		return v
	case <-t.C:
	case <-ctx.Done():
	}
	if r.seizing.CompareAndSwap(true, false) {
		return nil
	}
	return <-r.seized // a worker took it just now
}

// waitExpired waits until the victim's hold is forgotten by the store and
// someone else's token has passed the resource (and, if the victim's
// application runs, it has tried its old token against it).
func (r *round) waitExpired(v *victim) {
	running := v.w.frozen.Load() == nil
	d := r.ttl + 15*time.Second
	ok := eventually(d, func() bool {
		if int64(r.http.guard.Mark()) <= v.h.token || running && v.stale.Load() == 0 {
			return false
		}
		qctx, qcancel := context.WithTimeout(context.Background(), time.Second)
		defer qcancel()
		gone, err := r.c.Forgotten(qctx, v.w.site, v.h.lease, v.h.key)
		return err == nil && gone
	})
	if !ok {
		r.fail("%s: victim %d (token %d): hold not forgotten or no successor after %v (mark %d)",
			r.fault.Name, v.w.id, v.h.token, d, r.http.guard.Mark())
	}
}

// healed lets the victim, if any, go on: it makes a few more requests with
// its old token and then releases, and worker.release checks what it is
// told. It returns the time the fault healed.
func (r *round) healed(ctx context.Context, v *victim) int64 {
	heal := r.clk.now()
	if v == nil {
		return heal
	}
	close(v.healed)
	select {
	case <-v.ended:
	case <-ctx.Done():
		r.fail("%s: the zombie did not finish after the fault healed", r.fault.Name)
	}
	r.count(func(s *stats) { s.zombieStale += int(v.stale.Load()) })
	if v.stale.Load() == 0 {
		r.fail("%s: the zombie never had a request rejected as stale", r.fault.Name)
	}
	return heal
}

// checkKeysGone checks that no key is left under the round's root once every
// client is closed, except those the backend documents as kept.
func (r *round) checkKeysGone() {
	leftover := func() []string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := r.c.Leftover(ctx, r.root)
		if err != nil {
			return []string{"(listing failed: " + err.Error() + ")"}
		}
		return keys
	}
	keys := leftover()
	if len(keys) == 0 {
		return
	}
	if r.st.closeErrors == 0 {
		r.fail("keys left behind after every client closed cleanly: %v", keys)
		return
	}
	// A Close that could not reach the store leaves its keys to the lease.
	if !eventually(r.ttl+3*time.Second, func() bool { return len(leftover()) == 0 }) {
		r.fail("keys left behind %v after their leases' TTL: %v", r.ttl+3*time.Second, leftover())
	}
}

// check runs the checkers on the round's records.
func (r *round) check() {
	r.http.mu.Lock()
	applied, written, secs := r.http.applied, r.http.written, r.http.sections
	r.http.mu.Unlock()
	sqlTokens, sqlValues := r.sql.logged(r.t)

	for _, o := range r.httpOps {
		r.st.httpAttempted++
		if !o.write {
			r.st.reads++
		}
		switch o.out {
		case accepted:
			r.st.httpAccepted++
		case stale:
			r.st.httpStale++
		default:
			r.st.httpUnknown++
		}
	}
	for _, o := range r.sqlOps {
		r.st.sqlAttempted++
		switch o.out {
		case accepted:
			r.st.sqlAccepted++
		case stale:
			r.st.sqlStale++
		default:
			r.st.sqlUnknown++
		}
	}
	r.st.sections = len(secs)

	// (1) accepted tokens never go down, in each resource's own order, and
	// nothing acknowledged is missing.
	for _, err := range []error{
		checkOrder("HTTP register", applied),
		checkOrder("SQLite register", sqlTokens),
		checkNothingLost("HTTP register", r.httpOps, written),
		checkNothingLost("SQLite register", r.sqlOps, sqlValues),
		// (2) critical sections of different tokens never overlap.
		checkSections(secs),
	} {
		if err != nil {
			r.fail("%v", err)
		}
	}
	if r.st.httpAccepted != len(applied) {
		r.fail("HTTP register: clients saw %d requests accepted, the register applied %d", r.st.httpAccepted, len(applied))
	}
	// (3) linearizable histories.
	for _, h := range []struct {
		name   string
		ops    []op
		strict bool
	}{{"HTTP register", r.httpOps, false}, {"SQLite register", r.sqlOps, true}} {
		res, took := linearizable(h.ops, h.strict, 30*time.Second)
		r.st.porcupineOps += len(h.ops)
		r.st.porcupineTime += took
		switch res {
		case porcupine.Ok:
		case porcupine.Illegal:
			var b strings.Builder
			for _, o := range h.ops {
				b.WriteString("\n    " + describe(o))
			}
			r.fail("%s: history of %d operations is not linearizable:%s", h.name, len(h.ops), b.String())
		default:
			r.fail("%s: linearizability check of %d operations inconclusive after %v", h.name, len(h.ops), took)
		}
	}
}
