package primitives_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// eventually polls cond until it holds, failing t after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestGrantTokenFollowsLock: the token source stamps from Acquired, stops
// on Released, stamps the next grant, and stops on Lost: a client using it
// refuses to send once its lease is revoked.
func TestGrantTokenFollowsLock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := embedded.NewClient(etcdtest.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	prefix := "/test/" + t.Name()
	l, err := etcdio.NewLock(cli, prefix, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	followCtx, stop := context.WithCancel(ctx)
	defer stop()
	src := primitives.FollowGrants(followCtx, prefix, l)

	seen := make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := fencing.ScopeFromHTTP(r)
		tok, _ := fencing.FromHTTP(r)
		seen <- s + "@" + tok.String()
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: fencing.NewScopedTransport(tr, src.Scoped)}
	send := func() error {
		resp, err := client.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	if err := send(); !errors.Is(err, fencing.ErrNoToken) {
		t.Fatalf("before any grant: %v, want ErrNoToken", err)
	}
	g1, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first grant's token", func() bool { return src.Token() == g1.Token() })
	if err := send(); err != nil {
		t.Fatal(err)
	}
	if got, want := <-seen, prefix+"@"+g1.Token().String(); got != want {
		t.Fatalf("server saw %q, want %q", got, want)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no token after Unlock", func() bool { return src.Token() == 0 })

	g2, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second grant's token", func() bool { return src.Token() == g2.Token() })
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(g2.LeaseID)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no token after Lost", func() bool { return src.Token() == 0 })
	if err := send(); !errors.Is(err, fencing.ErrNoToken) {
		t.Fatalf("after Lost: %v, want ErrNoToken (nothing sent)", err)
	}
	stop()
	select {
	case <-src.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("GrantToken still following after its context ended")
	}
}

func TestFollowGrantsNil(t *testing.T) {
	src := primitives.FollowGrants(context.Background(), "/x", nil)
	if s, tok := src.Scoped(); tok != 0 || s != "/x" {
		t.Fatalf("Scoped() = %q, %d", s, tok)
	}
	select {
	case <-src.Done():
	default:
		t.Fatal("a GrantToken with nothing to follow is not done")
	}
}
