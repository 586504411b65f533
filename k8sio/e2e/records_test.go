package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// records lists the waiting candidates' records of identity id.
func records(t *testing.T, id string) []coordinationv1.Lease {
	t.Helper()
	list, err := admin().CoordinationV1().Leases(namespace).List(background(t), metav1.ListOptions{LabelSelector: k8sio.LabelCandidate + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	var mine []coordinationv1.Lease
	for _, l := range list.Items {
		if h := l.Spec.HolderIdentity; h != nil && *h == id {
			mine = append(mine, l)
		}
	}
	return mine
}

// recordOf returns the record of the waiting candidate id (nil: none).
func recordOf(t *testing.T, id string) *coordinationv1.Lease {
	t.Helper()
	if rs := records(t, id); len(rs) > 0 {
		return &rs[0]
	}
	return nil
}

// A waiting candidate shows its record while it waits; once its Campaign
// has returned (given up, or won) the record is gone.
func TestCandidateRecords(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	leader, waiter := newDisco(t, lease, "records-leader"), newDisco(t, lease, "records-waiter")
	if err := leader.Campaign(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := waiter.Campaign(cctx, "w"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign while another leads, past its deadline: %v", err)
	}
	if rs := records(t, "records-waiter"); len(rs) != 0 {
		t.Fatalf("records left by a Campaign that gave up: %v", rs)
	}
	won := make(chan error, 1)
	go func() { won <- waiter.Campaign(ctx, "w") }()
	eventually(t, 10*time.Second, "a record while the candidate waits", func() bool { return len(records(t, "records-waiter")) == 1 })
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "no record left after the candidate won", func() bool { return len(records(t, "records-waiter")) == 0 })
	leader.Close()
	waiter.Close()
}

// One session is one identity, the holderIdentity: it may run one
// candidate per election, and several elections.
func TestSessionOneCandidatePerElection(t *testing.T) {
	defer noneLeft(t)
	cs, _ := client(t)
	s, err := k8sio.NewSession(cs, k8sio.WithTTL(2*time.Second), k8sio.WithIdentity("shared"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := k8sio.NewElection(cs, namespace, leaseName(t.Name()+"-a"), k8sio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k8sio.NewElection(cs, namespace, leaseName(t.Name()+"-a"), k8sio.WithSession(s)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("a second candidate of one election on one session: %v, want ErrInvalidArgument", err)
	}
	b, err := k8sio.NewElection(cs, namespace, leaseName(t.Name()+"-b"), k8sio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	ctx := background(t)
	for _, e := range []interface {
		Campaign(context.Context, string) error
	}{a, b} {
		if err := e.Campaign(ctx, "v"); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("closing an election closed the shared session: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Err(); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("an election on a closed session: %v, want ErrClosed", err)
	}
}

// A waiting candidate renews its record (renewTime, with its TTL as the
// leaseDurationSeconds) while it waits.
func TestWaitingCandidateRenewsItsRecord(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	leader, waiter := newDisco(t, lease, "renew-leader"), newDisco(t, lease, "renew-waiter")
	if err := leader.Campaign(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	won := make(chan error, 1)
	go func() { won <- waiter.Campaign(ctx, "w") }()
	var first time.Time
	eventually(t, 10*time.Second, "a record with a renewTime", func() bool {
		r := recordOf(t, "renew-waiter")
		if r == nil || r.Spec.RenewTime == nil {
			return false
		}
		if d := r.Spec.LeaseDurationSeconds; d == nil || time.Duration(*d)*time.Second != interopTTL {
			t.Fatalf("record's leaseDurationSeconds %v, want the TTL %v", d, interopTTL)
		}
		first = r.Spec.RenewTime.Time
		return true
	})
	eventually(t, 3*interopTTL, "the record renewed", func() bool {
		r := recordOf(t, "renew-waiter")
		return r != nil && r.Spec.RenewTime != nil && r.Spec.RenewTime.After(first)
	})
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	leader.Close()
	waiter.Close()
}

// The record of a candidate that crashed while it waited (here: its
// connection cut, so that neither its renewals nor its Close's delete
// reach the server) is deleted by the next candidate that takes the Lease
// once the record has not been renewed for three of its lease durations;
// the record of a candidate still waiting, for just as long, stays.
func TestCrashedCandidateRecordSwept(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	leader := newDisco(t, lease, "swept-leader")
	if err := leader.Campaign(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	cs, link := client(t)
	crashed, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(interopTTL), k8sio.WithIdentity("swept-crashed"))
	if err != nil {
		t.Fatal(err)
	}
	crashedDone := make(chan error, 1)
	go func() { crashedDone <- crashed.Campaign(ctx, "c") }()
	a, b := newDisco(t, lease, "swept-a"), newDisco(t, lease, "swept-b")
	type won struct {
		e   election.Service
		err error
	}
	wins := make(chan won, 2)
	for _, e := range []election.Service{a, b} {
		go func() { wins <- won{e, e.Campaign(ctx, "w")} }()
	}
	win := func() election.Service {
		t.Helper()
		w := <-wins
		if w.err != nil {
			t.Fatalf("a live waiting candidate's Campaign: %v", w.err)
		}
		return w.e
	}
	for _, id := range []string{"swept-crashed", "swept-a", "swept-b"} {
		eventually(t, 10*time.Second, "record of "+id, func() bool { return recordOf(t, id) != nil })
	}
	link.Cut()
	if err := <-crashedDone; err == nil {
		t.Fatal("Campaign on a cut connection succeeded")
	}
	crashed.Close()
	if recordOf(t, "swept-crashed") == nil {
		t.Fatal("the cut candidate's Close reached the server: no crash to sweep after")
	}
	// Until its record is stale by this process's clock, which its
	// sweeper shares, and a margin.
	eventually(t, 20*interopTTL, "the crashed record stale", func() bool {
		r := recordOf(t, "swept-crashed")
		return r.Spec.RenewTime != nil && time.Since(r.Spec.RenewTime.Time) > 3*interopTTL+interopTTL/4
	})
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	winner := win()
	eventually(t, 10*time.Second, "the crashed candidate's record deleted", func() bool { return recordOf(t, "swept-crashed") == nil })
	loser := "swept-a"
	if winner == a {
		loser = "swept-b"
	}
	if recordOf(t, loser) == nil {
		t.Fatalf("the record of %s, waiting as long, was deleted too", loser)
	}
	if err := winner.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	win()
	leader.Close()
	a.Close()
	b.Close()
}

// stallRecordPatches is a RoundTripper that holds every PATCH of a
// candidate's record until the request's context ends, as an API server
// that does not answer those would.
type stallRecordPatches struct{ next http.RoundTripper }

func (s stallRecordPatches) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, ".disco-candidate-") {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return s.next.RoundTrip(r)
}

// A record renewal the API server does not answer is the record's
// trouble, not the session's: a candidate that only waits keeps its
// session (and its Campaign) through many TTLs of stalled renewals. When
// the renewals shared the session's round, the stalled PATCH used up the
// round's deadline, the round's version check failed, and the session was
// lost within a few TTLs.
func TestStalledRecordRenewalKeepsTheSession(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	leader := newDisco(t, lease, "stalled-leader")
	if err := leader.Campaign(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	cs, err := srv.Client(func(rt http.RoundTripper) http.RoundTripper { return stallRecordPatches{rt} })
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(interopTTL), k8sio.WithIdentity("stalled-waiter"))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	won := make(chan error, 1)
	go func() { won <- waiter.Campaign(ctx, "w") }()
	eventually(t, 10*time.Second, "the waiter's record", func() bool { return recordOf(t, "stalled-waiter") != nil })
	// Four TTLs: a renewal due every other round, each stalled.
	select {
	case err := <-won:
		t.Fatalf("the waiting Campaign ended while its record renewals stalled: %v", err)
	case <-waiter.Done():
		t.Fatalf("the waiter's session ended while its record renewals stalled: %v", waiter.Err())
	case <-time.After(4 * interopTTL): // the span the session must outlive, not synchronisation
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatalf("the waiter's Campaign once the leader resigned: %v", err)
	}
	leader.Close()
	waiter.Close()
}

// Close of a waiting candidate on a shared session deletes its record
// before it returns, as a Campaign that gives up does. Before, Close left
// the deletion to a helper and returned at once: the record was still
// listed, and stayed for good if the session closed next (or until a
// later leader's sweep, if the delete failed).
func TestCloseOnSharedSessionDeletesRecord(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	leader := newDisco(t, lease, "close-shared-leader")
	if err := leader.Campaign(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	cs, _ := client(t)
	s, err := k8sio.NewSession(cs, k8sio.WithIdentity("close-shared-waiter"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	campaigned := make(chan error, 1)
	go func() { campaigned <- w.Campaign(ctx, "w") }()
	eventually(t, 10*time.Second, "a record while the candidate waits", func() bool {
		return len(records(t, "close-shared-waiter")) == 1
	})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if rs := records(t, "close-shared-waiter"); len(rs) != 0 {
		t.Fatalf("Close returned, the waiting candidate's record still listed: %d", len(rs))
	}
	if err := <-campaigned; !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Campaign ended by Close: %v, want ErrClosed", err)
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	leader.Close()
}
