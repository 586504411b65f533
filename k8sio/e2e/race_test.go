package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// holdTake is a RoundTripper that holds the first update (PUT) of the
// Lease lease at the client, sent on to the API server only once release
// is closed: a candidate's take, read and decided, that reaches the server
// late. arrived is closed when it is held. A request whose context ends
// first gives up.
type holdTake struct {
	next             http.RoundTripper
	lease            string
	once             *sync.Once
	arrived, release chan struct{}
}

func newHoldTake(lease string) holdTake {
	return holdTake{lease: lease, once: new(sync.Once), arrived: make(chan struct{}), release: make(chan struct{})}
}

func (h holdTake) wrap(rt http.RoundTripper) http.RoundTripper { h.next = rt; return h }

func (h holdTake) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/leases/"+h.lease) {
		return h.next.RoundTrip(r)
	}
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.arrived)
		select {
		case <-h.release:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return h.next.RoundTrip(r)
}

// racer is a candidate whose first take of the Lease is held (see
// holdTake). Its TTL is the default: its take's request may wait up to
// opTimeout, far longer than the rest of the race takes.
func racer(t *testing.T, lease, id string) (election.Service, holdTake) {
	t.Helper()
	h := newHoldTake(lease)
	cs, err := srv.Client(h.wrap)
	if err != nil {
		t.Fatal(err)
	}
	e, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithIdentity(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, h
}

// leaseTerm is who holds the Lease now and the token its record names,
// by the Leader of w, an observer of the election.
func leaseTerm(t *testing.T, w election.Service) (string, fencing.Token) {
	t.Helper()
	ld, err := w.Leader(background(t))
	if err != nil {
		t.Fatal(err)
	}
	return ld.Value, ld.Token()
}

// createFree creates the Lease name, held by nobody, in place of any
// Lease of that name a run before left.
func createFree(t *testing.T, name string) *coordinationv1.Lease {
	t.Helper()
	leases := admin().CoordinationV1().Leases(namespace)
	if err := leases.Delete(background(t), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	l, err := leases.Create(background(t), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The Campaign race, Campaign against Campaign on a free Lease: both read
// the Lease at one resourceVersion r and both send a take conditioned on
// it. Here a's take is held at its client until b's take has landed, so
// that b wins with token r and a's take reaches the server second. The
// API server refuses a's take (Conflict): a reads the Lease again, finds
// b holding it, and waits; only one candidate leads, and a's later term,
// once b resigns, has a token above b's.
func TestCampaignRaceHeldTakeLoses(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) }) // last, after the candidates' Close
	lease := leaseName(t.Name())
	ctx := background(t)
	createFree(t, lease)
	a, held := racer(t, lease, "race-a")
	b := newDisco(t, lease, "race-b")
	aWon := make(chan error, 1)
	go func() { aWon <- a.Campaign(ctx, "a") }()
	within(t, held.arrived, 10*time.Second, "a's take held at its client")
	lb := mustLead(t, ctx, b, "b")
	close(held.release) // a's take, conditioned on the version b's take was, reaches the server
	eventually(t, 10*time.Second, "a waiting (its record written)", func() bool { return len(records(t, "race-a")) == 1 })
	select {
	case err := <-aWon:
		t.Fatalf("a's Campaign returned %v while b leads with token %d", err, lb.Token())
	default:
	}
	if _, leading := a.Term(); leading {
		t.Fatal("a leads beside b")
	}
	if v, tok := leaseTerm(t, newDisco(t, lease, "race-watcher")); tok != lb.Token() || v != "b" {
		t.Fatalf("the Lease names the leader %q with token %d, want b's term %d", v, tok, lb.Token())
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-aWon; err != nil {
		t.Fatal(err)
	}
	la, _ := a.Term()
	if la.Token() <= lb.Token() {
		t.Fatalf("a's token %d after b's %d", la.Token(), lb.Token())
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// The Campaign race with a delete in between: a's take, conditioned on the
// resourceVersion r that b's take was conditioned on too (b leads with
// token r), reaches the server after b's take and after the Lease was
// deleted. A PUT of a Lease that does not exist creates it (the Lease's
// AllowCreateOnUpdate), whatever resourceVersion it carries: were a's take
// applied, a would lead with token r, b's token, and a guard would admit
// the deposed b beside a. The take carries the Lease's uid, a precondition
// a deleted Lease fails (Conflict), so a reads again, creates the Lease
// and takes it with a token above the delete, above b's.
func TestCampaignRaceHeldTakeAfterDelete(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) }) // last, after the candidates' Close
	lease := leaseName(t.Name())
	ctx := background(t)
	leases := admin().CoordinationV1().Leases(namespace)
	createFree(t, lease)
	a, held := racer(t, lease, "race-del-a")
	b := newDisco(t, lease, "race-del-b")
	bEvents := b.Subscribe(ctx)
	aWon := make(chan error, 1)
	go func() { aWon <- a.Campaign(ctx, "a") }()
	within(t, held.arrived, 10*time.Second, "a's take held at its client")
	lb := mustLead(t, ctx, b, "b")
	gd := guard.New()
	if err := gd.Check(lb.Token()); err != nil {
		t.Fatal(err)
	}
	if err := leases.Delete(ctx, lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	close(held.release)
	if err := <-aWon; err != nil {
		t.Fatal(err)
	}
	la, _ := a.Term()
	if la.Token() <= lb.Token() {
		t.Fatalf("a leads with token %d after b's term %d and the Lease's delete: the tokens do not order (a's late take recreated the Lease)", la.Token(), lb.Token())
	}
	if v, tok := leaseTerm(t, newDisco(t, lease, "race-del-watcher")); tok != la.Token() || v != "a" {
		t.Fatalf("the Lease names the leader %q with token %d, want a's term %d", v, tok, la.Token())
	}
	if err := gd.Check(la.Token()); err != nil {
		t.Fatal(err)
	}
	if err := gd.Check(lb.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("the deposed b's token %d beside a's %d: %v, want ErrTokenStale", lb.Token(), la.Token(), err)
	}
	for ev := range bEvents {
		if lost, ok := ev.(primitives.Lost); ok {
			if lost.Token != lb.Token() {
				t.Fatalf("b's Lost %+v, want its term %d", lost, lb.Token())
			}
			break
		}
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

func mustLead(t *testing.T, ctx context.Context, e election.Service, value string) election.Leadership {
	t.Helper()
	if err := e.Campaign(ctx, value); err != nil {
		t.Fatal(err)
	}
	l, ok := e.Term()
	if !ok {
		t.Fatal("Campaign returned, Term not leading")
	}
	return l
}
