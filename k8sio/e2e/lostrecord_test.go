package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ahrtr/disco/k8sio"
)

// loseRecordAnswer is a RoundTripper that counts the creates (POST) of
// Leases and sends the first on to the API server, then loses its answer
// (calling lost, if set), as a connection that broke after the server
// applied the write would. The election's Lease exists before the client
// makes its first request, so its first create is its candidate record.
// If failDelete is set, the first delete of a candidate record fails
// unsent.
type loseRecordAnswer struct {
	next       http.RoundTripper
	creates    *atomic.Int32
	lost       func()
	failDelete *atomic.Bool
}

func (l loseRecordAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodDelete && strings.Contains(r.URL.Path, ".disco-candidate-") && l.failDelete.CompareAndSwap(true, false) {
		return nil, errors.New("connection refused")
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/leases") {
		return l.next.RoundTrip(r)
	}
	first := l.creates.Add(1) == 1
	resp, err := l.next.RoundTrip(r)
	if !first || err != nil {
		return resp, err
	}
	resp.Body.Close()
	if l.lost != nil {
		l.lost()
	}
	return nil, errors.New("connection reset after the request was sent")
}

// A waiting candidate whose record's create went through with its answer
// lost keeps one record (the one that landed: a later try finds it by its
// name), and nothing of it is left once its Campaign has returned, whether
// it won (even if its first delete of the record failed) or its caller
// gave up before any other try. Before, the candidate wrote no record
// again while the leader renewed the Lease, then a second record under a
// new name; the first, which it did not know of, stayed until a sweep, as
// did a record whose one delete failed.
func TestLostRecordCreateAnswer(t *testing.T) {
	defer noneLeft(t)
	for _, tc := range []struct {
		name       string
		id         string
		giveUp     bool // the caller gives up as the answer is lost
		failDelete bool // the record's first delete fails
	}{
		{"then won", "lost-record-won", false, false},
		{"then won, first delete failed", "lost-record-delete", false, true},
		{"then given up", "lost-record-given-up", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease, id := leaseName(t.Name()), tc.id
			ctx := background(t)
			leader := newDisco(t, lease, id+"-leader")
			if err := leader.Campaign(ctx, "l"); err != nil {
				t.Fatal(err)
			}
			cctx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			creates, failDelete := new(atomic.Int32), new(atomic.Bool)
			failDelete.Store(tc.failDelete)
			var lost func()
			if tc.giveUp {
				lost = giveUp
			}
			cs, err := srv.Client(func(rt http.RoundTripper) http.RoundTripper {
				return loseRecordAnswer{next: rt, creates: creates, lost: lost, failDelete: failDelete}
			})
			if err != nil {
				t.Fatal(err)
			}
			e, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(interopTTL), k8sio.WithIdentity(id))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			won := make(chan error, 1)
			go func() { won <- e.Campaign(cctx, "w") }()
			if tc.giveUp {
				if err := <-won; !errors.Is(err, context.Canceled) {
					t.Fatalf("Campaign whose caller gave up: %v, want context.Canceled", err)
				}
				if rs := records(t, id); len(rs) != 0 {
					t.Fatalf("%d records left once the Campaign returned: %v", len(rs), rs[0].Name)
				}
				return
			}
			eventually(t, 10*time.Second, "the record's create tried again", func() bool { return creates.Load() >= 2 })
			if rs := records(t, id); len(rs) != 1 {
				t.Fatalf("%d records of one waiting candidate, want 1", len(rs))
			}
			if err := leader.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-won; err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "no record left after the candidate won", func() bool { return len(records(t, id)) == 0 })
			if failDelete.Load() {
				t.Fatal("the record's delete was never tried")
			}
		})
	}
}
