package guard_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds every wait in these tests; it is a failure deadline, never
// a synchronisation device.
const patience = 10 * time.Second

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(patience):
		t.Fatalf("timed out waiting for %s to be cancelled", what)
	}
}

// notYet fails if ch delivers now or while the scheduler runs other
// goroutines for a while. It can miss a bug but never reports a false one.
func notYet[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	for range 200 {
		select {
		case <-ch:
			t.Fatalf("%s happened too early", what)
		default:
		}
		runtime.Gosched()
	}
}

func alive(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	if err := ctx.Err(); err != nil {
		t.Fatalf("%s context ended: %v (cause %v)", what, err, context.Cause(ctx))
	}
}

func mustStale(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	waitDone(t, ctx, what)
	if cause := context.Cause(ctx); !errors.Is(cause, fencing.ErrTokenStale) {
		t.Fatalf("%s cancelled with cause %v, want ErrTokenStale", what, cause)
	}
}

func admit(t *testing.T, g *guard.Guard, tok fencing.Token) (context.Context, func()) {
	t.Helper()
	ctx, done, err := g.Admit(context.Background(), tok)
	if err != nil {
		t.Fatalf("Admit(%d): %v", tok, err)
	}
	t.Cleanup(done)
	return ctx, done
}

type admission struct {
	ctx  context.Context
	done func()
	err  error
}

// admitAsync runs Admit in a goroutine and delivers its result.
func admitAsync(ctx context.Context, g *guard.Guard, tok fencing.Token) <-chan admission {
	ch := make(chan admission, 1)
	go func() {
		c, d, err := g.Admit(ctx, tok)
		ch <- admission{c, d, err}
	}()
	return ch
}

func TestCheck(t *testing.T) {
	g := guard.New()
	if g.Mark() != 0 {
		t.Fatalf("new mark = %d", g.Mark())
	}
	for _, tok := range []fencing.Token{5, 5, 6, 6, 100} {
		if err := g.Check(tok); err != nil {
			t.Fatalf("Check(%d): %v", tok, err)
		}
		if g.Mark() != tok {
			t.Fatalf("mark = %d after Check(%d)", g.Mark(), tok)
		}
	}
	err := g.Check(7)
	if !errors.Is(err, fencing.ErrTokenStale) || errors.Is(err, fencing.ErrNoToken) {
		t.Fatalf("Check(7) below 100: %v, want ErrTokenStale", err)
	}
	if !strings.Contains(err.Error(), "token 7 is below the mark 100") {
		t.Fatalf("error %q does not name both numbers", err)
	}
	for _, bad := range []fencing.Token{0, -1} {
		if err := g.Check(bad); !errors.Is(err, fencing.ErrNoToken) || errors.Is(err, fencing.ErrTokenStale) {
			t.Fatalf("Check(%d): %v, want ErrNoToken", bad, err)
		}
	}
	if g.Mark() != 100 {
		t.Fatalf("mark = %d, want 100", g.Mark())
	}
}

func TestZeroGuardAndInitialMark(t *testing.T) {
	var z guard.Guard
	if err := z.Check(1); err != nil || z.Mark() != 1 {
		t.Fatalf("zero Guard: Check(1) = %v, mark %d", err, z.Mark())
	}
	ctx, done, err := z.Admit(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	alive(t, ctx, "zero Guard admission")
	done()

	g := guard.New(guard.WithInitialMark(7))
	if g.Mark() != 7 {
		t.Fatalf("mark = %d, want 7", g.Mark())
	}
	if err := g.Check(6); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("Check(6) after restore at 7: %v", err)
	}
	if _, _, err := g.Admit(context.Background(), 6); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("Admit(6) after restore at 7: %v", err)
	}
	if err := g.Check(7); err != nil {
		t.Fatalf("Check(7): %v", err)
	}
	for _, bad := range []fencing.Token{0, -4} {
		if m := guard.New(guard.WithInitialMark(bad), nil).Mark(); m != 0 {
			t.Fatalf("WithInitialMark(%d): mark %d", bad, m)
		}
	}
}

func TestAdmitRejects(t *testing.T) {
	g := guard.New(guard.WithInitialMark(7))
	ctx, done, err := g.Admit(context.Background(), 5)
	if !errors.Is(err, fencing.ErrTokenStale) || !strings.Contains(err.Error(), "token 5 is below the mark 7") {
		t.Fatalf("Admit(5): %v", err)
	}
	if ctx != nil || done == nil {
		t.Fatalf("rejected Admit returned ctx %v, done nil? %t", ctx, done == nil)
	}
	done() // a no-op, must not panic
	for _, bad := range []fencing.Token{0, -1} {
		if _, done, err := g.Admit(context.Background(), bad); !errors.Is(err, fencing.ErrNoToken) {
			t.Fatalf("Admit(%d): %v, want ErrNoToken", bad, err)
		} else {
			done()
		}
	}
	if g.Mark() != 7 {
		t.Fatalf("mark = %d, want 7", g.Mark())
	}
}

func TestAdmitHigherCancelsLowerAndWaits(t *testing.T) {
	g := guard.New()
	low, lowDone := admit(t, g, 5)
	alive(t, low, "token 5")

	high := admitAsync(context.Background(), g, 6)
	mustStale(t, low, "token 5")
	if !strings.Contains(context.Cause(low).Error(), "superseded by token 6") {
		t.Fatalf("cause %q does not name the new token", context.Cause(low))
	}
	if g.Mark() != 6 {
		t.Fatalf("mark = %d, want 6 while 6 waits", g.Mark())
	}
	notYet(t, high, "admission of 6 before 5 is done")

	// A lower token is stale now, also for a bare Check.
	if _, _, err := g.Admit(context.Background(), 5); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("Admit(5) after 6 was seen: %v", err)
	}

	lowDone()
	a := recv(t, high, "admission of 6")
	if a.err != nil {
		t.Fatalf("Admit(6): %v", a.err)
	}
	defer a.done()
	alive(t, a.ctx, "token 6")
}

func TestAdmitWaitsForEveryLowerRequest(t *testing.T) {
	g := guard.New()
	a, aDone := admit(t, g, 3)
	b, bDone := admit(t, g, 3) // equal token: no wait
	high := admitAsync(context.Background(), g, 4)
	mustStale(t, a, "first 3")
	mustStale(t, b, "second 3")
	aDone()
	aDone() // idempotent: must not count twice
	notYet(t, high, "admission of 4 while one 3 is in flight")
	bDone()
	r := recv(t, high, "admission of 4")
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.done()
}

func TestAdmitEqualTokensRunConcurrently(t *testing.T) {
	g := guard.New()
	first, firstDone := admit(t, g, 9)
	// The second admission must not wait for the first: it happens in a
	// goroutine so that a wrong implementation fails by timeout, not hang.
	second := admitAsync(context.Background(), g, 9)
	r := recv(t, second, "second admission of 9")
	if r.err != nil {
		t.Fatal(r.err)
	}
	alive(t, first, "first 9")
	alive(t, r.ctx, "second 9")
	firstDone()
	r.done()

	// Equal tokens waiting behind a lower one are admitted together.
	low, lowDone := admit(t, g, 10)
	w1 := admitAsync(context.Background(), g, 11)
	w2 := admitAsync(context.Background(), g, 11)
	mustStale(t, low, "token 10")
	notYet(t, w1, "first 11 before 10 is done")
	notYet(t, w2, "second 11 before 10 is done")
	lowDone()
	r1 := recv(t, w1, "first 11")
	r2 := recv(t, w2, "second 11")
	if r1.err != nil || r2.err != nil {
		t.Fatal(r1.err, r2.err)
	}
	alive(t, r1.ctx, "first 11")
	alive(t, r2.ctx, "second 11")
	r1.done()
	r2.done()
}

func TestAdmitWaiterContextEnds(t *testing.T) {
	g := guard.New()
	low, lowDone := admit(t, g, 5)
	ctx, cancel := context.WithCancel(context.Background())
	high := admitAsync(ctx, g, 6)
	mustStale(t, low, "token 5")
	notYet(t, high, "admission of 6")
	cancel()
	r := recv(t, high, "Admit(6) giving up")
	if r.err == nil {
		r.done()
		t.Fatal("Admit(6) admitted after its context ended")
	}
	if !errors.Is(r.err, context.Canceled) || errors.Is(r.err, fencing.ErrTokenStale) {
		t.Fatalf("Admit(6): %v, want context.Canceled", r.err)
	}
	if r.ctx != nil {
		t.Fatal("a context returned with the error")
	}
	r.done()
	// The mark stays raised: 6 has been seen.
	if g.Mark() != 6 {
		t.Fatalf("mark = %d, want 6", g.Mark())
	}
	if _, _, err := g.Admit(context.Background(), 5); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("Admit(5): %v", err)
	}
	// Once 5 is done, 6 gets in at once.
	lowDone()
	six, sixDone := admit(t, g, 6)
	alive(t, six, "token 6")
	sixDone()

	// A deadline behaves the same way and is reported as such.
	_, sevenDone := admit(t, g, 7)
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer dcancel()
	if _, _, err := g.Admit(dctx, 8); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Admit(8) with deadline: %v", err)
	}
	sevenDone()
}

func TestAdmitWaiterBecomesStale(t *testing.T) {
	g := guard.New()
	low, lowDone := admit(t, g, 5)
	six := admitAsync(context.Background(), g, 6)
	mustStale(t, low, "token 5")
	seven := admitAsync(context.Background(), g, 7)
	r := recv(t, six, "Admit(6) made stale by 7")
	if !errors.Is(r.err, fencing.ErrTokenStale) {
		t.Fatalf("Admit(6): %v, want ErrTokenStale", r.err)
	}
	notYet(t, seven, "admission of 7 before 5 is done")

	// A Check also makes a waiter stale.
	if err := g.Check(8); err != nil {
		t.Fatal(err)
	}
	r = recv(t, seven, "Admit(7) made stale by Check(8)")
	if !errors.Is(r.err, fencing.ErrTokenStale) {
		t.Fatalf("Admit(7): %v, want ErrTokenStale", r.err)
	}
	eight := admitAsync(context.Background(), g, 8)
	notYet(t, eight, "admission of 8 before 5 is done")
	lowDone()
	r = recv(t, eight, "admission of 8")
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.done()
}

func TestCheckCancelsAdmitted(t *testing.T) {
	g := guard.New()
	a, aDone := admit(t, g, 5)
	b, bDone := admit(t, g, 5)
	if err := g.Check(5); err != nil { // equal: nothing happens
		t.Fatal(err)
	}
	alive(t, a, "a")
	alive(t, b, "b")
	if err := g.Check(6); err != nil { // returns without waiting for a and b
		t.Fatal(err)
	}
	mustStale(t, a, "a")
	mustStale(t, b, "b")
	aDone()
	bDone()
}

func TestDoneCancelsAndIsIdempotent(t *testing.T) {
	g := guard.New()
	type key struct{}
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	defer cancelParent()
	ctx, done, err := g.Admit(parent, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Value(key{}) != "v" {
		t.Fatal("admitted context not derived from the caller's")
	}
	done()
	done()
	waitDone(t, ctx, "admitted context after done")
	if cause := context.Cause(ctx); errors.Is(cause, fencing.ErrTokenStale) {
		t.Fatalf("cause after done = %v; not stale", cause)
	}
	// A later higher token must not wait for the finished request.
	_, d := admit(t, g, 4)
	d()

	// Parent cancellation reaches the admitted context.
	ctx, done, err = g.Admit(parent, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	cancelParent()
	waitDone(t, ctx, "admitted context after parent cancel")
}
