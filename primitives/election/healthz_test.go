package election_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// probe asks h as a liveness probe would and returns the status and body.
func probe(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return w.Code, w.Body.String()
}

// stuckLeader leads e with a fn wrapped by h that ignores its context
// until release is closed. It returns the term once fn runs, a channel
// closed once fn's context has ended, and Lead's result.
func stuckLeader(t *testing.T, ctx context.Context, e election.Service, h *election.Healthz) (election.Leadership, <-chan struct{}, chan struct{}, <-chan error) {
	t.Helper()
	terms := make(chan election.Leadership, 1)
	ended := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- election.Lead(ctx, e, "node-a", h.Wrap(func(ctx context.Context, l election.Leadership) error {
			terms <- l
			<-ctx.Done()
			close(ended)
			<-release // stuck in work it should have stopped
			return ctx.Err()
		}))
	}()
	select {
	case l := <-terms:
		return l, ended, release, done
	case err := <-done:
		t.Fatalf("Lead returned before fn ran: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not leading within 10s")
	}
	return election.Leadership{}, nil, nil, nil
}

// The probe passes while the leader leads and while a lost term's fn has
// time left; it fails, naming the term, once fn has run on for the timeout
// after the term was lost (or suspended, on a Service built to cancel
// there); it passes again once fn returns. A caller stopping Lead itself
// is never a failure.
func TestHealthz(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	for _, c := range []struct {
		name    string
		timeout time.Duration
		opts    []memio.Option
		end     func(e election.Service, stop context.CancelFunc)
		fails   bool
	}{
		{"lost", 0, nil, func(e election.Service, _ context.CancelFunc) { memio.SessionOf(e).Expire() }, true},
		{"lost, time left", time.Hour, nil, func(e election.Service, _ context.CancelFunc) { memio.SessionOf(e).Expire() }, false},
		{"suspended, cancel there", 0, []memio.Option{memio.WithCancelOnSuspend()},
			func(e election.Service, _ context.CancelFunc) { memio.SessionOf(e).Suspend() }, true},
		{"the caller stops", 0, nil, func(_ election.Service, stop context.CancelFunc) { stop() }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := election.NewHealthz(c.timeout)
			if err != nil {
				t.Fatal(err)
			}
			e, err := memio.NewElection(memio.NewStore(), "/healthz", c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			if code, body := probe(t, h); code != http.StatusOK {
				t.Fatalf("before leading: %d %q", code, body)
			}
			term, ended, release, done := stuckLeader(t, ctx, e, h)
			if code, body := probe(t, h); code != http.StatusOK {
				t.Fatalf("while leading: %d %q", code, body)
			}
			c.end(e, stop)
			<-ended
			code, body := probe(t, h)
			if c.fails {
				if code != http.StatusInternalServerError || !strings.Contains(body, term.Key) || !errors.Is(h.Check(), election.ErrStuck) {
					t.Fatalf("fn stuck after its term ended: %d %q, want 500 naming %s", code, body, term.Key)
				}
			} else if code != http.StatusOK {
				t.Fatalf("%d %q, want 200", code, body)
			}
			t.Logf("fn stuck: %d %s", code, strings.TrimSpace(body))
			close(release)
			<-done
			if code, body := probe(t, h); code != http.StatusOK {
				t.Fatalf("after fn returned: %d %q", code, body)
			}
		})
	}
	if _, err := election.NewHealthz(-time.Second); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("NewHealthz(-1s): %v, want ErrInvalidArgument", err)
	}
}

// On etcd: a leader whose lease is revoked while its fn is stuck fails the
// probe until fn returns.
func TestHealthzEtcd(t *testing.T) {
	srv, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	e, err := etcdio.NewElection(cli, "/healthz", etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h, err := election.NewHealthz(0)
	if err != nil {
		t.Fatal(err)
	}
	term, ended, release, done := stuckLeader(t, context.Background(), e, h)
	if code, body := probe(t, h); code != http.StatusOK {
		t.Fatalf("while leading: %d %q", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(term.LeaseID)); err != nil {
		t.Fatal(err)
	}
	<-ended
	if code, body := probe(t, h); code != http.StatusInternalServerError || !strings.Contains(body, "lost") {
		t.Fatalf("fn stuck after the lease was revoked: %d %q, want 500", code, body)
	}
	close(release)
	if err := <-done; !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Lead: %v, want ErrLost", err)
	}
	if code, body := probe(t, h); code != http.StatusOK {
		t.Fatalf("after fn returned: %d %q", code, body)
	}
}
