package e2e_test

import (
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/k8sio/e2e/faults"
	"github.com/ahrtr/disco/primitives/conformance"
	"github.com/ahrtr/disco/primitives/election"
)

const conformanceTTL = 3 * time.Second

// owner is what the hooks need of a candidate the factory made.
type owner struct {
	link     *faults.Link
	identity string
}

func TestConformance(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) }) // runs last, after every service's Close
	var owners sync.Map               // election.Service -> owner
	var n atomic.Int64
	of := func(t *testing.T, svc any) owner {
		o, ok := owners.Load(svc)
		if !ok {
			t.Fatalf("not a service of the factory: %T", svc)
		}
		return o.(owner)
	}
	b := conformance.Backend{
		Name: "kubernetes",
		TTL:  conformanceTTL,
		NewElection: func(t *testing.T, name string) election.Service {
			cs, link := client(t)
			id := "candidate-" + itoa(n.Add(1))
			e, err := k8sio.NewElection(cs, namespace, leaseName(name), k8sio.WithTTL(conformanceTTL), k8sio.WithIdentity(id))
			if err != nil {
				t.Fatal(err)
			}
			owners.Store(e, owner{link, id})
			t.Cleanup(func() { link.Heal(); e.Close() })
			return e
		},
		KillSession: func(t *testing.T, svc any) { of(t, svc).link.Cut() },
		Pause: func(t *testing.T, svc any) func() {
			l := of(t, svc).link
			l.Pause()
			return l.Heal
		},
		PauseRenewal: func(t *testing.T, svc any) func() {
			l := of(t, svc).link
			l.Cut()
			return l.Heal
		},
		DeleteKey: func(t *testing.T, key string) {
			ns, name, _ := strings.Cut(key, "/")
			if err := admin().CoordinationV1().Leases(ns).Delete(background(t), name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete %s: %v", key, err)
			}
		},
		DeleteWaiter: func(t *testing.T, svc any) {
			id := of(t, svc).identity
			leases := admin().CoordinationV1().Leases(namespace)
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				list, err := leases.List(background(t), metav1.ListOptions{LabelSelector: k8sio.LabelCandidate + "=true"})
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range list.Items {
					if h := l.Spec.HolderIdentity; h != nil && *h == id {
						if err := leases.Delete(background(t), l.Name, metav1.DeleteOptions{}); err != nil {
							t.Fatal(err)
						}
						return
					}
				}
				time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
			}
			t.Fatalf("no candidate record of %s", id)
		},
		Construct: func(t *testing.T, kind, name string) (io.Closer, error) {
			e, err := k8sio.NewElection(admin(), namespace, name)
			if err != nil {
				return nil, err
			}
			return e, nil
		},
		MaxValue: k8sio.MaxValueSize,
		BadNames: []string{"Upper", "a/b", "a_b", "-a", "x.disco-candidate-y", strings.Repeat("a", 230)},
	}
	conformance.TestElection(t, b)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
