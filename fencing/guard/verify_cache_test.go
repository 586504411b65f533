package guard_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// TestAbandonedVerificationAskedAgain: a verification that every request
// gave up on, and that the verifier (ignoring its context) then answers
// with a success, is asked again by the next request of its token, which
// is admitted. Before, every later request of the token joined the
// finished call again and again, spinning until the store timeout and
// failing with ErrUnverified, and the verifier was never asked again.
func TestAbandonedVerificationAskedAgain(t *testing.T) {
	v := newGrants()
	v.grant("", 10)
	gate := make(chan struct{})
	v.mu.Lock()
	v.gate = gate
	v.mu.Unlock()
	g := guard.New(guard.WithVerifier(v), guard.WithStoreTimeout(2*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- g.CheckContext(ctx, 10) }()
	recv(t, v.entered, "the first verification")
	cancel()
	if err := recv(t, first, "the first request"); err == nil {
		t.Fatal("a request that gave up was admitted")
	}
	v.mu.Lock()
	v.gate = nil
	v.mu.Unlock()
	close(gate) // the abandoned verification answers: yes
	if err := g.Check(10); err != nil {
		t.Fatalf("the token's next request: %v", err)
	}
	if n := v.calls.Load(); n != 2 {
		t.Fatalf("%d verifications, want 2 (the abandoned one, then the next request's)", n)
	}
}

// failingRaises is a store whose Raise fails while fail is set.
type failingRaises struct {
	guard.MarkStore
	fail atomic.Bool
}

func (s *failingRaises) Raise(ctx context.Context, scope string, t fencing.Token) error {
	if s.fail.Load() {
		return errors.New("disk full")
	}
	return s.MarkStore.Raise(ctx, scope, t)
}

// TestFailedRaiseForgetsTheVerification: a verified token whose raise in
// the store failed is verified again by its next request, so that once its
// grant is over its zombie is refused. Before, the success was kept until
// the mark reached the token, and the zombie was admitted unchecked.
func TestFailedRaiseForgetsTheVerification(t *testing.T) {
	v := newGrants()
	v.grant("", 10)
	st := &failingRaises{MarkStore: fileStore(t, t.TempDir())}
	st.fail.Store(true)
	g := guard.New(guard.WithVerifier(v), guard.WithStore(st))
	if err := g.Check(10); !errors.Is(err, guard.ErrStore) {
		t.Fatalf("Check with the store's raise failing: %v, want ErrStore", err)
	}
	st.fail.Store(false)
	v.grant("", 0) // grant 10 is over
	if err := g.Check(10); !errors.Is(err, fencing.ErrTokenForged) {
		t.Fatalf("Check of an ended grant's token: %v, want ErrTokenForged (mark %d)", err, g.Mark())
	}
}

// TestScopeLabelNotUTF8: a scope that is not valid UTF-8, under
// WithScopeLabels, is admitted and leaves nothing behind: the next token
// of the scope is admitted too. Before, the gauge's label panicked after
// the request had been admitted, and the scope's next token waited for
// that request's end for as long as its context allowed.
func TestScopeLabelNotUTF8(t *testing.T) {
	m, err := guard.NewMetrics(prometheus.NewRegistry(), guard.WithScopeLabels())
	if err != nil {
		t.Fatal(err)
	}
	k := guard.NewKeyed(guard.WithMetrics(m))
	const scope = "/locks/\xff"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tok := range []fencing.Token{5, 6} {
		_, done, err := k.Admit(ctx, scope, tok)
		if err != nil {
			t.Fatalf("Admit(%q, %d): %v", scope, tok, err)
		}
		done()
	}
	if err := k.Check(scope, 7); err != nil {
		t.Fatalf("Check(%q, 7): %v", scope, err)
	}
}
