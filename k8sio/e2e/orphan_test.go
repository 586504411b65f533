package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/k8sio"
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
	e, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithIdentity("late-take")) // the default TTL, 10 s
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	cctx, giveUp := context.WithCancel(ctx)
	campaigned := make(chan error, 1)
	go func() { campaigned <- e.Campaign(cctx, "v") }()
	within(t, lt.arrived, 10*time.Second, "the take sent")
	giveUp()
	close(lt.abandon)
	if err := <-campaigned; !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign given up: %v, want context.Canceled", err)
	}
	close(lt.release)
	within(t, lt.landed, 10*time.Second, "the late take applied")
	if *lt.status != http.StatusOK {
		t.Fatalf("the late take was answered %d, not applied: the test shows nothing", *lt.status)
	}
	testkit.Eventually(t, 5*time.Second, "the late take's term resigned (half the lease duration)", func() bool {
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
