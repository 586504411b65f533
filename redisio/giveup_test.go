package redisio_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// scriptGate is a go-redis hook that, while armed, holds the first caller
// of a script its match accepts, before (pre) or after (post) Redis runs
// it, until proceed is closed; reached is closed when it holds one. With
// fail, the held call then fails with fail, its reply lost.
type scriptGate struct {
	match   func(args []any) bool
	post    bool
	fail    error
	armed   atomic.Bool
	reached chan struct{}
	proceed chan struct{}
}

func newScriptGate(post bool, match func(args []any) bool) *scriptGate {
	return &scriptGate{match: match, post: post, reached: make(chan struct{}), proceed: make(chan struct{})}
}

func (g *scriptGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *scriptGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *scriptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		held := false
		hold := func() {
			if g.armed.Load() && g.match(cmd.Args()) && g.armed.CompareAndSwap(true, false) {
				held = true
				close(g.reached)
				<-g.proceed
			}
		}
		if !g.post {
			hold()
		}
		err := next(ctx, cmd)
		if g.post && err == nil {
			hold()
		}
		if held && g.fail != nil {
			return g.fail
		}
		return err
	}
}

// isScript reports whether args are an EVAL or EVALSHA of numkeys keys,
// the first one first, and nargs arguments (-1: any).
func isScript(args []any, numkeys, nargs int, first string) bool {
	if len(args) < 3+numkeys {
		return false
	}
	if c := fmt.Sprint(args[0]); c != "evalsha" && c != "eval" {
		return false
	}
	n, _ := strconv.Atoi(fmt.Sprint(args[2]))
	return n == numkeys && fmt.Sprint(args[3]) == first && (nargs < 0 || len(args) == 3+numkeys+nargs)
}

// TestDoubleBarrierGiveUpAsRoundCompletes: a party whose Enter gives up
// (ctx ends) while another's Enter completes the round with it counted is
// in: its Enter returns nil, as the other's does, and both leave. Its
// withdrawal took it out unconditionally, and Enter returned ctx.Err()
// for a party the other had counted.
func TestDoubleBarrierGiveUpAsRoundCompletes(t *testing.T) {
	r := testserver.StartRedis(t)
	const name = "giveup-complete"
	admin := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// a's withdrawal (a script of three keys, the hash first) is held
	// until b's Enter has returned.
	g := newScriptGate(false, func(a []any) bool { return isScript(a, 3, -1, name+"/dbarrier") })
	cliA := newClient(t, r)
	cliA.AddHook(g)
	a := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(cliA, name, 2))
	b := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 2))
	actx, acancel := context.WithCancel(ctx)
	aerr := make(chan error, 1)
	go func() { aerr <- a.Enter(actx) }()
	testkit.Eventually(t, 10*time.Second, "a counted in", func() bool {
		return admin.ZCard(ctx, name+"/dbarrier.parties").Val() == 1
	})
	g.armed.Store(true)
	acancel()
	<-g.reached // a gave up; its withdrawal is on its way
	errB := b.Enter(ctx)
	close(g.proceed)
	errA := <-aerr
	bothIn(ctx, t, a, b, errA, errB)
	if keys := admin.Keys(ctx, name+"/dbarrier*").Val(); len(keys) > 0 {
		t.Errorf("keys left after the round: %v", keys)
	}
}

// bothIn fails t unless both parties' Enters returned nil (errA, errB),
// then has both leave.
func bothIn(ctx context.Context, t *testing.T, a, b barrier.DoubleBarrier, errA, errB error) {
	t.Helper()
	if errB != nil {
		t.Fatalf("b's Enter: %v", errB)
	}
	if errA != nil {
		t.Fatalf("a's Enter returned %v, yet b passed the barrier counting it", errA)
	}
	left := make(chan error, 1)
	go func() { left <- a.Leave(ctx) }()
	if err := b.Leave(ctx); err != nil {
		t.Fatalf("b's Leave: %v", err)
	}
	if err := <-left; err != nil {
		t.Fatalf("a's Leave: %v", err)
	}
}

// TestDoubleBarrierEnterReplyLostAsRoundCompletes: a party whose Enter
// script counted it in and completed the round, its reply lost, is in:
// Enter returns nil. It withdrew and failed, and the other party passed
// the barrier counting it.
func TestDoubleBarrierEnterReplyLostAsRoundCompletes(t *testing.T) {
	r := testserver.StartRedis(t)
	const name = "replylost-complete"
	admin := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// a's Enter script (four keys, the hash first, four arguments) runs,
	// then its call fails.
	g := newScriptGate(true, func(a []any) bool { return isScript(a, 4, 4, name+"/dbarrier") })
	g.fail = errors.New("reply lost")
	close(g.proceed)
	cliA := newClient(t, r)
	cliA.AddHook(g)
	a := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(cliA, name, 2))
	b := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 2))
	berr := make(chan error, 1)
	go func() { berr <- b.Enter(ctx) }()
	testkit.Eventually(t, 10*time.Second, "b counted in", func() bool {
		return admin.ZCard(ctx, name+"/dbarrier.parties").Val() == 1
	})
	g.armed.Store(true)
	errA := a.Enter(ctx)
	errB := <-berr
	bothIn(ctx, t, a, b, errA, errB)
}

// TestCloseWaitsForAcquisitionUnderWay: Close on a shared session, as an
// acquisition's script has granted (or queued) its hold in Redis and the
// answer is on its way to the service, returns only once that hold is
// withdrawn: nothing of the service is left once Close returns. Close
// found nothing to release and returned; the acquirer withdrew after.
func TestCloseWaitsForAcquisitionUnderWay(t *testing.T) {
	r := testserver.StartRedis(t)
	type acquirer struct {
		open   func(cli *redis.Client, name string, s *redisio.Session) (interface{ Close() error }, func(context.Context) error, error)
		script func(name string) func(args []any) bool
		post   bool
	}
	enqueue := func(name string) func(args []any) bool {
		return func(a []any) bool { return isScript(a, 4, -1, name+"/seq") || isScript(a, 5, -1, name+"/seq") }
	}
	party := func(name string) func(args []any) bool {
		return func(a []any) bool { return isScript(a, 4, 4, name+"/dbarrier") }
	}
	for what, c := range map[string]acquirer{
		"semaphore": {
			open: func(cli *redis.Client, name string, s *redisio.Session) (interface{ Close() error }, func(context.Context) error, error) {
				sem, err := redisio.NewSemaphore(cli, name, 1, redisio.WithSession(s))
				if err != nil {
					return nil, nil, err
				}
				return sem, func(ctx context.Context) error { _, err := sem.Acquire(ctx); return err }, nil
			},
			script: enqueue, post: true,
		},
		"lock": {
			open: func(cli *redis.Client, name string, s *redisio.Session) (interface{ Close() error }, func(context.Context) error, error) {
				l, err := redisio.NewLock(cli, name, redisio.WithSession(s))
				if err != nil {
					return nil, nil, err
				}
				return l, func(ctx context.Context) error { _, err := l.Lock(ctx); return err }, nil
			},
			script: enqueue, post: true,
		},
		"rwlock": {
			open: func(cli *redis.Client, name string, s *redisio.Session) (interface{ Close() error }, func(context.Context) error, error) {
				l, err := redisio.NewRWLock(cli, name, redisio.WithSession(s))
				if err != nil {
					return nil, nil, err
				}
				return l, func(ctx context.Context) error { _, err := l.RLock(ctx); return err }, nil
			},
			script: enqueue,
		},
		"election": {
			open: func(cli *redis.Client, name string, s *redisio.Session) (interface{ Close() error }, func(context.Context) error, error) {
				e, err := redisio.NewElection(cli, name, redisio.WithSession(s))
				if err != nil {
					return nil, nil, err
				}
				return e, func(ctx context.Context) error { return e.Campaign(ctx, "v") }, nil
			},
			script: enqueue, post: true,
		},
		"double barrier": {
			open: func(cli *redis.Client, name string, s *redisio.Session) (interface{ Close() error }, func(context.Context) error, error) {
				d, err := redisio.NewDoubleBarrier(cli, name, 2, redisio.WithSession(s))
				if err != nil {
					return nil, nil, err
				}
				return d, d.Enter, nil
			},
			script: party,
		},
	} {
		t.Run(what, func(t *testing.T) {
			name := "close-underway-" + what[:4]
			admin := newClient(t, r)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g := newScriptGate(c.post, c.script(name))
			proceed := sync.OnceFunc(func() { close(g.proceed) })
			defer proceed() // on a failure
			cli := newClient(t, r)
			cli.AddHook(g)
			// A script on the name's keys that runs once Close has returned
			// is the acquisition's, writing or withdrawing its key late.
			var returned, late atomic.Bool
			cli.AddHook(afterScript(func(args []any) {
				if returned.Load() && len(args) > 3 && strings.HasPrefix(fmt.Sprint(args[3]), name+"/") {
					late.Store(true)
				}
			}))
			s := testkit.ClosedAtEnd[*redisio.Session](t)(redisio.NewSession(cli))
			svc, acquire, err := c.open(cli, name, s)
			if err != nil {
				t.Fatal(err)
			}
			g.armed.Store(true)
			acquired := make(chan error, 1)
			go func() { acquired <- acquire(ctx) }()
			<-g.reached // the script is on its way, or its answer is
			closed := make(chan []string, 1)
			go func() {
				_ = svc.Close()
				returned.Store(true)
				closed <- leftBehindOf(ctx, admin, name)
			}()
			select {
			case <-doneOf(svc):
			case <-ctx.Done():
				t.Fatal("Close did not end the service")
			}
			proceed()
			left := <-closed
			if err := <-acquired; !errors.Is(err, primitives.ErrClosed) {
				t.Errorf("acquisition: %v, want ErrClosed", err)
			}
			if len(left) > 0 {
				t.Errorf("left once Close returned: %v", left)
			}
			if late.Load() {
				t.Errorf("the acquisition under way ran a script on the name's keys after Close returned")
			}
			if keys := leftBehindOf(ctx, admin, name); len(keys) > 0 {
				t.Errorf("left after the acquisition returned: %v", keys)
			}
			if err := s.Err(); err != nil {
				t.Errorf("the shared session: %v", err)
			}
		})
	}
}

// doneOf returns the Done channel of a primitive.
func doneOf(p any) <-chan struct{} {
	return p.(interface{ Done() <-chan struct{} }).Done()
}

// leftBehindOf returns the keys of name that hold or queue something: its
// hold keys, party keys and held records (name/seq, name/permits and an
// empty name/held's counter are no one's).
func leftBehindOf(ctx context.Context, admin *redis.Client, name string) []string {
	var left []string
	for _, k := range admin.Keys(ctx, globEscape(name)+"/*").Val() {
		switch k {
		case name + "/seq", name + "/permits", name + "/rtok":
			continue
		case name + "/held":
			for f := range admin.HGetAll(ctx, k).Val() {
				if f != "n" {
					left = append(left, k+"["+f+"]")
				}
			}
			continue
		}
		left = append(left, k)
	}
	return left
}

// afterScript is a go-redis hook that calls f with the command's
// arguments after every script Redis ran.
type afterScript func(args []any)

func (f afterScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f afterScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f afterScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c := fmt.Sprint(cmd.Args()[0]); err == nil && (c == "evalsha" || c == "eval") {
			f(cmd.Args())
		}
		return err
	}
}

// TestUncontendedAcquireGivenUpAsGranted: an acquisition whose caller gives
// up (ctx ends) while the script that granted it at once is on its way
// back returns ctx.Err() and leaves nothing behind, as the lock's contract
// says and the other backends do. Lock returned the grant, and the service
// held it, to a caller whose ctx had ended.
func TestUncontendedAcquireGivenUpAsGranted(t *testing.T) {
	r := testserver.StartRedis(t)
	for what, acquire := range map[string]func(ctx context.Context, cli *redis.Client, name string) (interface{ Close() error }, error){
		"lock": func(ctx context.Context, cli *redis.Client, name string) (interface{ Close() error }, error) {
			l, err := redisio.NewLock(cli, name)
			if err == nil {
				_, err = l.Lock(ctx)
			}
			return l, err
		},
		"semaphore": func(ctx context.Context, cli *redis.Client, name string) (interface{ Close() error }, error) {
			s, err := redisio.NewSemaphore(cli, name, 2)
			if err == nil {
				_, err = s.Acquire(ctx)
			}
			return s, err
		},
		"election": func(ctx context.Context, cli *redis.Client, name string) (interface{ Close() error }, error) {
			e, err := redisio.NewElection(cli, name)
			if err == nil {
				err = e.Campaign(ctx, "v")
			}
			return e, err
		},
	} {
		t.Run(what, func(t *testing.T) {
			name := "giveup-granted-" + what
			admin := newClient(t, r)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g := newScriptGate(true, func(a []any) bool { return isScript(a, 4, -1, name+"/seq") })
			proceed := sync.OnceFunc(func() { close(g.proceed) })
			defer proceed()
			cli := newClient(t, r)
			cli.AddHook(g)
			g.armed.Store(true)
			actx, acancel := context.WithCancel(ctx)
			go func() {
				<-g.reached // granted in Redis, the answer on its way
				acancel()
				proceed()
			}()
			svc, err := acquire(actx, cli, name)
			if svc != nil {
				defer svc.Close()
			}
			if err != context.Canceled {
				t.Fatalf("acquisition given up as it was granted: %v, want exactly context.Canceled", err)
			}
			if left := leftBehindOf(ctx, admin, name); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

// TestDoubleBarrierEnterReplyHeldNotCounted: a party whose Enter returns
// its context's error while its script's reply does not come (the script
// ran and counted it; Redis answers the party's other requests) is taken
// out at once, not when the reply comes: a party entering after that does
// not pass the barrier counting it. It stayed counted until the reply
// came, and the other party passed counting it.
func TestDoubleBarrierEnterReplyHeldNotCounted(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const name = "replyheld-notcounted"
	admin := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// a's Enter script (four keys, the hash first, four arguments) runs,
	// and its reply is held until the end.
	g := newScriptGate(true, func(a []any) bool { return isScript(a, 4, 4, name+"/dbarrier") })
	defer sync.OnceFunc(func() { close(g.proceed) })()
	g.armed.Store(true)
	cliA := newClient(t, r)
	cliA.AddHook(g)
	a := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(cliA, name, 2))
	b := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(admin, name, 2))
	actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer acancel()
	if err := a.Enter(actx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a's Enter, its reply held: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	select {
	case <-g.reached: // a's script ran: a was counted
	default:
		t.Fatal("a's Enter returned before its script ran")
	}
	testkit.Eventually(t, 10*time.Second, "a, whose Enter failed, taken out", func() bool {
		return admin.ZCard(ctx, name+"/dbarrier.parties").Val() == 0
	})
	bctx, bcancel := context.WithTimeout(ctx, time.Second)
	defer bcancel()
	if err := b.Enter(bctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("b's Enter, a having failed to enter: %v, want it to wait for a second party until its context ends", err)
	}
}

// TestAcquireReplyHeldNotHeld: a Lock that returns its context's error
// while the reply of one of its requests does not come (Redis ran it and
// answers the lock's other requests) leaves nothing in the lock once it
// returns, or soon after: another owner's TryLock gets it. The hold, which
// the enqueue queued (and granted), or the check granted, stayed until
// the reply came, and every TryLock found the lock taken.
func TestAcquireReplyHeldNotHeld(t *testing.T) {
	r := testserver.StartRedis(t)
	for _, tc := range []struct {
		what string
		// match is the request whose reply is held: the enqueue (four
		// keys, seq first, seven arguments), or the check (five keys,
		// two arguments), a's Lock waiting behind b's hold.
		match  func(name string) func([]any) bool
		behind bool
	}{
		{"enqueue", func(name string) func([]any) bool {
			return func(a []any) bool { return isScript(a, 4, 7, name+"/seq") }
		}, false},
		{"check", func(name string) func([]any) bool {
			return func(a []any) bool { return isScript(a, 5, 2, name+"/seq") }
		}, true},
	} {
		t.Run(tc.what, func(t *testing.T) {
			testkit.NoLeaks(t)
			name := "replyheld-" + tc.what
			admin := newClient(t, r)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g := newScriptGate(true, tc.match(name))
			defer sync.OnceFunc(func() { close(g.proceed) })()
			cliA := newClient(t, r)
			cliA.AddHook(g)
			a := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cliA, name))
			b := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(admin, name))
			actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer acancel()
			if tc.behind {
				if _, err := b.Lock(ctx); err != nil {
					t.Fatalf("b's Lock: %v", err)
				}
				go func() { // b lets a's check grant a once a waits
					poll := time.NewTicker(5 * time.Millisecond) // polling, bounded by ctx
					defer poll.Stop()
					for admin.ZCard(ctx, name+"/queue").Val() != 2 {
						select {
						case <-poll.C:
						case <-ctx.Done():
							return
						}
					}
					_ = b.Unlock(ctx)
				}()
				actx, acancel = context.WithTimeout(ctx, 3*time.Second)
				defer acancel()
				go func() { // a gives up once its check ran
					select {
					case <-g.reached:
					case <-ctx.Done():
					}
					acancel()
				}()
			}
			g.armed.Store(true)
			if _, err := a.Lock(actx); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Fatalf("a's Lock, its reply held: %v, want an error wrapping its context's", err)
			}
			select {
			case <-g.reached: // a's request ran
			default:
				t.Fatal("a's Lock returned before its request ran")
			}
			var took bool
			testkit.Eventually(t, 3*time.Second, "b's TryLock, a having given up", func() bool {
				_, err := b.TryLock(ctx)
				if err != nil && !errors.Is(err, lock.ErrLockTaken) {
					t.Fatalf("b's TryLock: %v", err)
				}
				took = err == nil
				return took
			})
			if took {
				_ = b.Unlock(ctx)
			}
		})
	}
}

// failedAfterRun is a gate that lets a script matching match run, then
// fails the call, its reply lost: the connection dropped after Redis ran
// it.
func failedAfterRun(match func([]any) bool) *scriptGate {
	g := newScriptGate(true, match)
	g.fail = errors.New("connection reset after the script ran (test)")
	close(g.proceed)
	g.armed.Store(true)
	return g
}

// TestHoldFailedAfterRunNotHeld: a Hold that returns an error after
// Redis ran its script (its reply lost) leaves the barrier lowered. It
// was left raised by a Hold that said it failed, and no Release of the
// caller's would come.
func TestHoldFailedAfterRunNotHeld(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const name = "holdfailed"
	admin := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := failedAfterRun(func(a []any) bool { return isScript(a, 1, 1, name+"/barrier") })
	cli := newClient(t, r)
	cli.AddHook(g)
	b, err := redisio.NewBarrier(cli, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(ctx); err == nil {
		t.Fatal("Hold, its reply lost: nil, want an error")
	}
	select {
	case <-g.reached:
	default:
		t.Fatal("Hold returned before its script ran")
	}
	if n := admin.Exists(ctx, name+"/barrier").Val(); n != 0 {
		t.Errorf("the barrier is raised after a Hold that failed")
	}
}

// leading returns a client of its own, and a candidate on it that leads
// the election name with the value "a", for a test with a Redis server of
// its own, and an admin client.
func leading(ctx context.Context, t *testing.T, name string) (admin, cli *redis.Client, e election.Service) {
	t.Helper()
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin, cli = newClient(t, r), newClient(t, r)
	e = testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, name))
	if err := e.Campaign(ctx, "a"); err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	return admin, cli, e
}

// leaderValue is the value of the election name's leader in Redis, read
// by another candidate.
func leaderValue(ctx context.Context, t *testing.T, cli *redis.Client, name string) string {
	t.Helper()
	o := testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, name))
	l, err := o.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	return l.Value
}

// TestProclaimFailedAfterRunUnchanged: a Proclaim that returns an error
// after Redis ran its script (its reply lost) leaves the leader's value
// as it was, in Redis as in the term. It was changed in Redis, and the
// term kept the old one.
func TestProclaimFailedAfterRunUnchanged(t *testing.T) {
	const name = "proclaimfailed"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, cli, e := leading(ctx, t, name)
	// The Proclaim's script: four keys, the queue first, two arguments.
	g := failedAfterRun(func(a []any) bool { return isScript(a, 4, 2, name+"/queue") })
	cli.AddHook(g)
	if err := e.Proclaim(ctx, "b"); err == nil {
		t.Fatal("Proclaim, its reply lost: nil, want an error")
	}
	select {
	case <-g.reached:
	default:
		t.Fatal("Proclaim returned before its script ran")
	}
	term, _ := e.Term()
	if got := leaderValue(ctx, t, admin, name); got != "a" || term.Value != "a" {
		t.Errorf("after a Proclaim that failed: the value is %q in Redis, %q in the term; want %q in both", got, term.Value, "a")
	}
}

// TestProclaimUndoneAfterLaterOne: a Proclaim that gives up, its script
// held before Redis runs it, and a later Proclaim that succeeds leave
// Redis with the later one's value, the term's. The first one's script
// ran after the later one, and its undo put back the value it had seen:
// Redis and the term differed.
func TestProclaimUndoneAfterLaterOne(t *testing.T) {
	const name = "proclaimlater"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, cli, e := leading(ctx, t, name)
	// The first Proclaim's script (four keys, the queue first, two
	// arguments) is held before Redis runs it; undone tells when the
	// undo's (three arguments) has run.
	g := newScriptGate(false, func(a []any) bool { return isScript(a, 4, 2, name+"/queue") })
	proceed := sync.OnceFunc(func() { close(g.proceed) })
	defer proceed()
	undone := failedAfterRun(func(a []any) bool { return isScript(a, 4, 3, name+"/queue") })
	undone.fail = nil
	cli.AddHook(g)
	cli.AddHook(undone)
	g.armed.Store(true)
	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer pcancel()
	if err := e.Proclaim(pctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the first Proclaim, held: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	later := make(chan error, 1)
	go func() { later <- e.Proclaim(ctx, "y") }()
	var err error
	returned := false
	select {
	case err = <-later:
		returned = true
	// A bound, not a synchronisation: the later Proclaim may wait for
	// the first one; if not, it is done well within it.
	case <-time.After(200 * time.Millisecond):
	}
	proceed()
	select {
	case <-undone.reached:
	case <-ctx.Done():
		t.Fatal("the first Proclaim was never undone")
	}
	if !returned {
		err = <-later
	}
	if err != nil {
		t.Fatalf("the later Proclaim: %v", err)
	}
	term, _ := e.Term()
	if got := leaderValue(ctx, t, admin, name); got != "y" || term.Value != "y" {
		t.Errorf("after the later Proclaim: the value is %q in Redis, %q in the term; want %q in both", got, term.Value, "y")
	}
}

// TestDoubleBarrierContextErrorItself: an Enter that waits for the other
// parties and a Leave that waits for them return ctx.Err() itself as
// their context ends, as barrier.DoubleBarrier promises and every other
// backend does; so do an Enter and a Leave called with a context ended
// already.
func TestDoubleBarrierContextErrorItself(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const name = "ctxitself"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 2))
	b := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 2))
	itself := func(what string, err error) {
		t.Helper()
		if err != context.DeadlineExceeded { //nolint:errorlint // the promise is ctx.Err() itself
			t.Errorf("%s: %v, want ctx.Err() itself (context.DeadlineExceeded)", what, err)
		}
	}
	actx, acancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer acancel()
	itself("a's Enter alone", a.Enter(actx))
	itself("a's Enter, its context ended", a.Enter(actx))
	errs := make(chan error, 2)
	for _, p := range []barrier.DoubleBarrier{a, b} {
		go func() { errs <- p.Enter(ctx) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Enter: %v", err)
		}
	}
	lctx, lcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer lcancel()
	itself("a's Leave, b staying", a.Leave(lctx))
	itself("a's Leave, its context ended", a.Leave(lctx))
}
