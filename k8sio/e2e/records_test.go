package e2e_test

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
)

// records lists the waiting candidates' records of identity id.
func records(t *testing.T, id string) []string {
	t.Helper()
	list, err := admin().CoordinationV1().Leases(namespace).List(background(t), metav1.ListOptions{LabelSelector: k8sio.LabelCandidate + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range list.Items {
		if h := l.Spec.HolderIdentity; h != nil && *h == id {
			names = append(names, l.Name)
		}
	}
	return names
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
	deadline := time.Now().Add(10 * time.Second)
	for len(records(t, "records-waiter")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no record while the candidate waits")
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(records(t, "records-waiter")) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("record left after the candidate won: %v", records(t, "records-waiter"))
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
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
