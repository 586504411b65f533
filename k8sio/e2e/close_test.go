package e2e_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/k8sio"
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
	e := testkit.ClosedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(ttl), k8sio.WithIdentity("close-resign-fails")))
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
