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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
)

// lagging is a RoundTripper whose watches deliver nothing until release
// is closed (their events queue up, as behind a slow watch), and whose
// reads of one Lease (a GET with a field selector, not a watch) fail while
// failReads is set.
// watching is closed at the first watch, which the service's follower
// starts once its first read of the Lease is delivered.
type lagging struct {
	next      http.RoundTripper
	release   chan struct{}
	failReads *atomic.Bool
	watching  chan struct{}
	once      *sync.Once
}

func (l lagging) RoundTrip(r *http.Request) (*http.Response, error) {
	isWatch := strings.Contains(r.URL.RawQuery, "watch=true")
	if isWatch {
		l.once.Do(func() { close(l.watching) })
	}
	if r.Method == http.MethodGet && !isWatch && strings.Contains(r.URL.RawQuery, "fieldSelector") && l.failReads.Load() {
		return nil, errors.New("connection refused")
	}
	resp, err := l.next.RoundTrip(r)
	if err != nil || !isWatch {
		return resp, err
	}
	resp.Body = gatedBody{resp.Body, l.release, r.Context().Done()}
	return resp, nil
}

type gatedBody struct {
	io.ReadCloser
	release, ended <-chan struct{}
}

func (b gatedBody) Read(p []byte) (int, error) {
	select {
	case <-b.release:
	case <-b.ended:
		return 0, io.ErrUnexpectedEOF
	}
	return b.ReadCloser.Read(p)
}

// A leader whose write of the Lease conflicts (someone else changed it)
// and whose read of it then fails keeps what it knew: watch events older
// than its own take, still queued behind a slow watch, do not tell it of
// an earlier holder. Before, the conflict forgot the resourceVersion the
// leader knew the Lease at, so the next stale event was taken as the
// Lease's state: the leader told its subscribers of the earlier holder
// (its token going back) and lost its own term, still the Lease's.
func TestConflictKeepsWhatTheLeaderKnew(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	lease := leaseName(t.Name())
	ctx := background(t)
	leases := admin().CoordinationV1().Leases(namespace)
	l := createFree(t, lease)
	release, failReads, watching := make(chan struct{}), new(atomic.Bool), make(chan struct{})
	cs, err := srv.Client(func(rt http.RoundTripper) http.RoundTripper {
		return lagging{rt, release, failReads, watching, new(sync.Once)}
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithIdentity("stale-leader"))
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
		e.Close()
	})
	events := e.Subscribe(ctx)
	// The follower has read the free Lease: what comes next reaches the
	// service through its (held) watch alone.
	within(t, watching, 10*time.Second, "the service's watch started")

	// An earlier holder comes and goes (events the leader's watch holds).
	prev, dur := "earlier-holder", int32(1)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &prev, &dur
	if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	empty := ""
	l.Spec.HolderIdentity = &empty
	if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lt := mustLead(t, ctx, e, "v")

	// Someone else's edit, then a Proclaim: its write conflicts, and its
	// read again fails.
	failReads.Store(true)
	cur, err := leases.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Annotations["example.com/edit"] = "1"
	if cur, err = leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(ctx, "w"); err == nil {
		t.Fatal("Proclaim succeeded with its reads failing")
	}

	// The watch catches up; a last edit, of the value, marks its end.
	close(release)
	released = true
	cur.Annotations[k8sio.AnnotationValue] = "edited"
	if _, err = leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(20 * time.Second)
	for caughtUp := false; !caughtUp; {
		select {
		case ev := <-events:
			switch ev := ev.(type) {
			case primitives.LeaderChanged:
				if ev.Token != lt.Token() {
					t.Errorf("LeaderChanged %+v while the leader's term %d stands", ev, lt.Token())
				}
				caughtUp = ev.Value == "edited"
			case primitives.Lost:
				t.Errorf("Lost %+v: the term is still the Lease's", ev)
			}
		case <-deadline:
			t.Fatal("the leader's watch did not catch up")
		}
	}
	failReads.Store(false)
	if _, leading := e.Term(); !leading {
		t.Fatal("the leader lost its term, still the Lease's")
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
