package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives/election"
)

// lateTake is a RoundTripper that holds the first update (PUT) of the
// Lease lease; once abandon is closed it fails the request at the client,
// while the API server still gets it, once release is closed, as a server
// that applies a write after its client gave up on it would. landed is
// closed when the server has answered it.
type lateTake struct {
	next                              http.RoundTripper
	lease                             string
	once                              *sync.Once
	arrived, abandon, release, landed chan struct{}
	status                            *int // the late take's answer, once landed
}

func (l lateTake) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/leases/"+l.lease) {
		return l.next.RoundTrip(r)
	}
	first := false
	l.once.Do(func() { first = true })
	if !first {
		return l.next.RoundTrip(r)
	}
	close(l.arrived)
	<-l.abandon
	late := r.Clone(context.Background())
	if r.GetBody != nil {
		body, err := r.GetBody()
		if err != nil {
			return nil, err
		}
		late.Body = body
	}
	go func() {
		defer close(l.landed)
		<-l.release
		if resp, err := l.next.RoundTrip(late); err == nil {
			*l.status = resp.StatusCode
			resp.Body.Close()
		}
	}()
	return nil, errors.New("request timed out")
}

// giveUpAtTake starts a Campaign of e and gives it up once its take has
// reached the client's transport (arrived is closed); the Campaign's
// answer comes on the channel.
func giveUpAtTake(t *testing.T, ctx context.Context, e election.Service, arrived <-chan struct{}) <-chan error {
	t.Helper()
	cctx, giveUp := context.WithCancel(ctx)
	campaigned := make(chan error, 1)
	go func() { campaigned <- e.Campaign(cctx, "v") }()
	within(t, arrived, 10*time.Second, "the take sent")
	giveUp()
	return campaigned
}

// A take the API server applies after its Campaign gave up (the client
// timed out; the server wrote it later) leaves a term nobody holds. The
// candidate, which knows the token it tried, resigns that term as soon as
// it sees it, so that the next candidate need not wait out a whole lease
// duration for a leader that never was. Before, the Lease named the
// candidate until its lease duration had passed.
func TestLateTakeAfterCampaignGaveUp(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	lease := leaseName(t.Name())
	ctx := background(t)
	leases := admin().CoordinationV1().Leases(namespace)
	createFree(t, lease)
	lt := lateTake{lease: lease, once: new(sync.Once), arrived: make(chan struct{}), abandon: make(chan struct{}),
		release: make(chan struct{}), landed: make(chan struct{}), status: new(int)}
	cs, err := srv.Client(func(rt http.RoundTripper) http.RoundTripper { lt.next = rt; return lt })
	if err != nil {
		t.Fatal(err)
	}
	e := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lease, k8sio.WithIdentity("late-take"))) // the default TTL, 10 s
	campaigned := giveUpAtTake(t, ctx, e, lt.arrived)
	close(lt.abandon)
	if err := <-campaigned; !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign given up: %v, want context.Canceled", err)
	}
	close(lt.release)
	within(t, lt.landed, 10*time.Second, "the late take applied")
	if *lt.status != http.StatusOK {
		t.Fatalf("the late take was answered %d, not applied: the test shows nothing", *lt.status)
	}
	eventually(t, 5*time.Second, "the late take's term resigned (half the lease duration)", func() bool {
		l, err := leases.Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""
	})
	if _, leading := e.Term(); leading {
		t.Fatal("a Campaign that gave up leads")
	}
}

// failPut is a RoundTripper that fails the updates (PUT) of the Lease lease
// from the from-th to the to-th unsent, counting them in puts.
type failPut struct {
	next     http.RoundTripper
	lease    string
	from, to int32
	puts     *atomic.Int32
}

func (f failPut) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/leases/"+f.lease) && f.fails(f.puts.Add(1)) {
		return nil, errors.New("connection refused")
	}
	return f.next.RoundTrip(r)
}

func (f failPut) fails(n int32) bool { return n >= f.from && n <= f.to }

// A take that lands after its Campaign's caller gave up makes a term nobody
// holds, which the candidate resigns at once; a resign that fails is tried
// again until it goes through, so that other candidates need not wait out
// the term's lease duration. Before, the failed resign was only logged, and
// the term stayed on the Lease, leaderless, for its whole lease duration.
func TestGaveUpTakeResignFails(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	lease := leaseName(t.Name())
	ctx := background(t)
	leases := admin().CoordinationV1().Leases(namespace)
	createFree(t, lease)
	held, puts := newHoldTake(lease), new(atomic.Int32)
	cs, err := srv.Client(func(rt http.RoundTripper) http.RoundTripper {
		// The take goes through; its resign fails, and so does the one the
		// take's watch event brings, so that only a retry resigns the term.
		return held.wrap(failPut{next: rt, lease: lease, from: 2, to: 3, puts: puts})
	})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 30 * time.Second // the lease duration a leaderless term blocks others for
	e := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(ttl), k8sio.WithIdentity("gave-up-resign-fails")))
	campaigned := giveUpAtTake(t, ctx, e, held.arrived)
	// The caller leaves once its grace has passed, the loop still busy
	// with the held take; its withdrawal goes on without it.
	if err := <-campaigned; !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign given up: %v, want context.Canceled", err)
	}
	close(held.release) // the take lands, and its resign fails
	eventually(t, 10*time.Second, "the take and its resign sent", func() bool { return puts.Load() >= 2 })
	eventually(t, 10*time.Second, "the term resigned, well within its lease duration of "+ttl.String(), func() bool {
		l, err := leases.Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tr := l.Spec.LeaseTransitions; tr == nil || *tr != 1 {
			t.Fatalf("the Lease's transitions %v, want 1: the take did not land, the test shows nothing", tr)
		}
		return l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""
	})
	if _, leading := e.Term(); leading {
		t.Fatal("a Campaign that gave up leads")
	}
}
