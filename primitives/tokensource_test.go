package primitives_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
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

// TestGrantTokenFollowsSemaphoreSlot: on a semaphore, whose every slot is
// its own fencing scope, FollowGrants stamps each grant's slot scope
// ("<name>#<slot>", semaphore.Grant.Scope), so a keyed guard that needs the
// scope of the slot a request writes to admits the holder of that slot.
func TestGrantTokenFollowsSemaphoreSlot(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := embedded.NewClient(etcdtest.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	prefix := "/test/" + t.Name()
	defer func() { _ = etcdio.RetireSemaphore(context.Background(), cli, prefix) }()

	// The resource: slot i's data at /slot/i, guarded by the mark of the
	// scope of slot i.
	k := guard.NewKeyed()
	srv := httptest.NewServer(k.HTTPMiddleware(func(r *http.Request) string {
		slot, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/slot/"))
		if err != nil {
			return ""
		}
		return semaphore.Scope(prefix, slot)
	}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	type holder struct {
		sem    semaphore.Service
		src    *primitives.GrantToken
		client *http.Client
	}
	var hs []holder
	for range 2 {
		sem, err := etcdio.NewSemaphore(cli, prefix, 2, etcdio.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer sem.Close()
		src := primitives.FollowGrants(ctx, prefix, sem)
		hs = append(hs, holder{sem, src, &http.Client{Transport: fencing.NewScopedTransport(tr, src.Scoped)}})
	}
	write := func(h holder, slot int) int {
		t.Helper()
		resp, err := h.client.Post(srv.URL+"/slot/"+strconv.Itoa(slot), "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	var grants []semaphore.Grant
	for i, h := range hs {
		g, err := h.sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
		eventually(t, "the grant's token", func() bool { return h.src.Token() == g.Token() })
		if code := write(h, g.Slot); code != http.StatusOK {
			scope, _ := h.src.Scoped()
			t.Fatalf("holder %d writing to its slot %d with scope %q: status %d, want 200", i, g.Slot, scope, code)
		}
		if scope, tok := h.src.Scoped(); scope != g.Scope() || tok != g.Token() {
			t.Fatalf("holder %d of slot %d: Scoped() = %q, %d; want %q, %d", i, g.Slot, scope, tok, g.Scope(), g.Token())
		}
	}
	if grants[0].Slot == grants[1].Slot {
		t.Fatalf("two holders of slot %d", grants[0].Slot)
	}
	// A holder writing to another holder's slot carries the wrong scope.
	if code := write(hs[0], grants[1].Slot); code != http.StatusForbidden {
		t.Fatalf("holder of slot %d writing to slot %d: status %d, want 403", grants[0].Slot, grants[1].Slot, code)
	}
	// Released: nothing is stamped; the next grant of the freed slot is.
	if err := hs[0].sem.Release(ctx, grants[0]); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no token after Release", func() bool { return hs[0].src.Token() == 0 })
	g, err := hs[0].sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new grant's token", func() bool { return hs[0].src.Token() == g.Token() })
	if scope, _ := hs[0].src.Scoped(); scope != g.Scope() {
		t.Fatalf("after a new Acquire: scope %q, want %q", scope, g.Scope())
	}
	if code := write(hs[0], g.Slot); code != http.StatusOK {
		t.Fatalf("new holder of slot %d: status %d, want 200", g.Slot, code)
	}
}
