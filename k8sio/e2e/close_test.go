package e2e_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// failReleases is a RoundTripper that fails, unsent, the first n releases
// of the Lease lease (updates that leave holderIdentity empty), counting
// them in tries.
type failReleases struct {
	next  http.RoundTripper
	lease string
	n     int32
	tries *atomic.Int32
}

func (f failReleases) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/leases/"+f.lease) || r.GetBody == nil {
		return f.next.RoundTrip(r)
	}
	body, err := r.GetBody()
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if l, ok := obj.(*coordinationv1.Lease); err == nil && ok && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "" && f.tries.Add(1) <= f.n {
		return nil, errors.New("connection refused")
	}
	return f.next.RoundTrip(r)
}

// A leader's Close whose resign fails tries it again, so that the Lease is
// free once Close has returned and the next candidate need not wait out
// the lease duration. Before, Close sent the resign once and only logged
// its failure: the Lease named the closed leader for its whole lease
// duration.
func TestCloseRetriesAFailedResign(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	lease := leaseName(t.Name())
	ctx := background(t)
	tries := new(atomic.Int32)
	cs, err := srv.Client(func(rt http.RoundTripper) http.RoundTripper {
		return failReleases{next: rt, lease: lease, n: 1, tries: tries}
	})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 30 * time.Second // the lease duration a closed leader would block others for
	e := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(ttl), k8sio.WithIdentity("close-resign-fails")))
	mustLead(t, ctx, e, "v")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n := tries.Load(); n == 0 {
		t.Fatal("Close sent no resign: the test shows nothing")
	}
	l, err := admin().CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("the Lease names %q as holder once its Close has returned (%d resigns sent), lease duration %v", *h, tries.Load(), ttl)
	}
}

// failAfterLostTake is a RoundTripper beneath a loseTakeAnswer whose take's
// answer is lost when lost is closed: from then on it fails, unsent, every
// read (list) of the Lease lease, so that the candidate cannot look at its
// take again but through its watch, and the first update of it.
type failAfterLostTake struct {
	next       http.RoundTripper
	lease      string
	lost       chan struct{}
	failedOnce *atomic.Bool
}

func (f failAfterLostTake) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case <-f.lost:
	default:
		return f.next.RoundTrip(r)
	}
	put := r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/leases/"+f.lease)
	list := r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/leases") &&
		strings.Contains(r.URL.RawQuery, f.lease) && r.URL.Query().Get("watch") == ""
	if list || put && f.failedOnce.CompareAndSwap(false, true) {
		return nil, errors.New("connection refused")
	}
	return f.next.RoundTrip(r)
}

// A Campaign whose take went through with its answer lost, closed before
// it could look at the Lease again, leaves no term behind once Close has
// returned, even if the first resign of that term fails. Before, Close
// resigned the term once and only logged the failure: the Lease named the
// closed candidate, leaderless, for its whole lease duration.
func TestCloseRetriesTheResignOfALostTake(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	lease := leaseName(t.Name())
	ctx := background(t)
	createFree(t, lease)
	lost := make(chan struct{})
	cs, err := srv.Client(func(rt http.RoundTripper) http.RoundTripper {
		f := failAfterLostTake{next: rt, lease: lease, lost: lost, failedOnce: new(atomic.Bool)}
		return loseTakeAnswer{next: f, lease: lease, giveUp: func() { close(lost) }, once: new(sync.Once)}
	})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 30 * time.Second // the lease duration a leaderless term blocks others for
	e := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(ttl), k8sio.WithIdentity("close-lost-take")))
	events := e.Subscribe(ctx)
	campaigned := make(chan error, 1)
	go func() { campaigned <- e.Campaign(ctx, "v") }()
	within(t, lost, 10*time.Second, "the take's answer lost")
	for ev := range events { // the candidate has seen its take through its watch
		if lc, ok := ev.(primitives.LeaderChanged); ok && lc.Value == "v" {
			break
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-campaigned; !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Campaign of a closed candidate: %v, want ErrClosed", err)
	}
	l, err := admin().CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr := l.Spec.LeaseTransitions; tr == nil || *tr != 1 {
		t.Fatalf("the Lease's transitions %v, want 1: the take did not land, the test shows nothing", tr)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("the Lease names %q as holder once its Close has returned, lease duration %v", *h, ttl)
	}
}
