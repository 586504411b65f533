package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/k8sio"
)

// loseTakeAnswer is a RoundTripper that sends the first update (PUT) of
// the Lease lease on to the API server and then, its answer lost, calls
// giveUp and fails the request, as a connection that broke after the
// server applied the write would.
type loseTakeAnswer struct {
	next   http.RoundTripper
	lease  string
	giveUp func()
	once   *sync.Once
}

func (l loseTakeAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/leases/"+l.lease) {
		return l.next.RoundTrip(r)
	}
	lost := false
	l.once.Do(func() { lost = true })
	resp, err := l.next.RoundTrip(r)
	if !lost || err != nil {
		return resp, err
	}
	resp.Body.Close()
	l.giveUp()
	return nil, errors.New("connection reset after the request was sent")
}

// A Campaign whose take of the Lease went through with its answer lost,
// and whose caller gave up before the take was looked at again, leaves no
// term behind: once Campaign has returned, the Lease names no holder.
// Before, the term stayed with nobody holding it: Leader and Observe
// reported it, and other candidates waited a whole lease duration.
func TestLostTakeAnswerThenGiveUp(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	cctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	cs, err := srv.Client(func(rt http.RoundTripper) http.RoundTripper {
		return loseTakeAnswer{next: rt, lease: lease, giveUp: giveUp, once: new(sync.Once)}
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(interopTTL), k8sio.WithIdentity("lost-take"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Campaign(cctx, "v"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign whose caller gave up: %v, want context.Canceled", err)
	}
	l, err := admin().CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("the Lease names %q as holder after its Campaign gave up", *h)
	}
}
