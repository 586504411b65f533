package safety

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// misuseClient returns a client of every member, closed when t ends, and a
// root prefix of t's own.
func misuseClient(t *testing.T) (*clientv3.Client, string) {
	t.Helper()
	c := cluster(t)
	cli, err := c.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, "/safety/misuse/" + t.Name() + "/"
}

// wantErr fails t unless err wraps target and has a message.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) || err.Error() == "" {
		t.Errorf("%s: got %v, want an error wrapping %q", what, err, target)
	}
}

// noKeys fails t if keys other than the rwlock epoch keys are under root.
func noKeys(t *testing.T, cli *clientv3.Client, root string) {
	t.Helper()
	resp, err := cli.Get(context.Background(), root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if !strings.HasSuffix(string(kv.Key), etcdio.EpochSuffix) {
			t.Errorf("key left behind: %s", kv.Key)
		}
	}
}

func closedClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := embedded.NewClient(cluster(t).Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	return cli
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMisuseConstructors(t *testing.T) {
	cli, root := misuseClient(t)
	closed := closedClient(t)
	other, _ := misuseClient(t)
	sess, err := etcdio.NewSession(cli, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	dead, err := etcdio.NewSession(cli, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	p := root + "p"
	type mk func(*clientv3.Client, string, ...etcdio.Option) error
	kinds := map[string]mk{
		"NewLock": func(c *clientv3.Client, p string, o ...etcdio.Option) error {
			_, err := etcdio.NewLock(c, p, o...)
			return err
		},
		"NewRWLock": func(c *clientv3.Client, p string, o ...etcdio.Option) error {
			_, err := etcdio.NewRWLock(c, p, o...)
			return err
		},
		"NewElection": func(c *clientv3.Client, p string, o ...etcdio.Option) error {
			_, err := etcdio.NewElection(c, p, o...)
			return err
		},
	}
	for name, newP := range kinds {
		for what, err := range map[string]error{
			"nil client":                   newP(nil, p),
			"closed client":                newP(closed, p),
			"empty prefix":                 newP(cli, ""),
			"TTL 0":                        newP(cli, p, etcdio.WithTTL(0)),
			"TTL 500ms":                    newP(cli, p, etcdio.WithTTL(500*time.Millisecond)),
			"negative TTL":                 newP(cli, p, etcdio.WithTTL(-time.Second)),
			"nil option":                   newP(cli, p, nil),
			"WithTTL and WithSession":      newP(cli, p, etcdio.WithSession(sess), etcdio.WithTTL(5*time.Second)),
			"session of another client":    newP(other, p, etcdio.WithSession(sess)),
			"nil client with a session":    newP(nil, p, etcdio.WithSession(sess)),
			"closed client with a session": newP(closed, p, etcdio.WithSession(sess)),
		} {
			wantErr(t, name+": "+what, err, etcdio.ErrInvalidArgument)
		}
		// A session that is closed already cannot carry a new primitive.
		wantErr(t, name+": closed session", newP(cli, p, etcdio.WithSession(dead)), primitives.ErrClosed)
	}
	_, err = etcdio.NewSession(nil)
	wantErr(t, "NewSession(nil)", err, etcdio.ErrInvalidArgument)
	_, err = etcdio.NewSession(closed)
	wantErr(t, "NewSession(closed client)", err, etcdio.ErrInvalidArgument)
	_, err = etcdio.NewSession(cli, etcdio.WithSession(sess))
	wantErr(t, "NewSession(WithSession)", err, etcdio.ErrInvalidArgument)
	wantErr(t, "second Session.Close", dead.Close(), primitives.ErrClosed)
	if isDone(sess.Done()) {
		t.Fatalf("refused constructors ended the shared session: %v", sess.Err())
	}
	noKeys(t, cli, root)
}

// TestMisusePrefixOverlap: on one session, a prefix used by a primitive of
// another kind, or nested in or around any other primitive's prefix, is
// refused with ErrPrefixInUse, the session lives on, and nothing is written.
func TestMisusePrefixOverlap(t *testing.T) {
	cli, root := misuseClient(t)
	sess, err := etcdio.NewSession(cli, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	on := etcdio.WithSession(sess)
	l, err := etcdio.NewLock(cli, root+"a", on)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rw, err := etcdio.NewRWLock(cli, root+"b", on)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	el, err := etcdio.NewElection(cli, root+"c", on)
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()

	refuse := func(what string, err error) {
		t.Helper()
		wantErr(t, what, err, etcdio.ErrPrefixInUse)
	}
	_, err = etcdio.NewElection(cli, root+"a", on)
	refuse("election on a lock's prefix", err)
	_, err = etcdio.NewRWLock(cli, root+"a", on)
	refuse("rwlock on a lock's prefix", err)
	_, err = etcdio.NewLock(cli, root+"b", on)
	refuse("lock on a rwlock's prefix", err)
	_, err = etcdio.NewLock(cli, root+"c", on)
	refuse("lock on an election's prefix", err)
	_, err = etcdio.NewLock(cli, root+"a/x", on)
	refuse("lock nested in a lock's prefix", err)
	_, err = etcdio.NewElection(cli, root+"b/read", on)
	refuse("election nested in a rwlock's queue", err)
	_, err = etcdio.NewLock(cli, strings.TrimSuffix(root, "/"), on)
	refuse("lock around every other prefix", err)

	// The refusals harmed nothing: the session lives, the primitives work,
	// and a second lock of the same kind may share a prefix.
	if isDone(sess.Done()) {
		t.Fatalf("session ended: %v", sess.Err())
	}
	l2, err := etcdio.NewLock(cli, root+"a", on)
	if err != nil {
		t.Fatalf("a second lock on the same prefix: %v", err)
	}
	defer l2.Close()
	ctx := ctx10(t)
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("two locks on one session and prefix do not exclude each other: %v", err)
	}
	if err := l.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	// Separate sessions may use one prefix for different kinds: that is
	// their users' business, not disco's to refuse.
	other, err := etcdio.NewElection(cli, root+"a")
	if err != nil {
		t.Fatalf("another session, another kind on the same prefix: %v", err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	noKeys(t, cli, root)
}

func TestMisuseElection(t *testing.T) {
	cli, root := misuseClient(t)
	ctx := ctx10(t)
	e, err := etcdio.NewElection(cli, root+"e", etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Resign before Campaign", e.Resign(ctx), election.ErrNotLeader)
	wantErr(t, "Proclaim before Campaign", e.Proclaim(ctx, "x"), election.ErrNotLeader)
	_, err = e.Leader(ctx)
	wantErr(t, "Leader of an empty election", err, election.ErrNoLeader)
	if _, ok := e.Term(); ok {
		t.Error("Term before Campaign reports a term")
	}
	if err := e.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	term, ok := e.Term()
	if !ok {
		t.Fatal("no term after Campaign")
	}
	// A second Campaign by the same candidate waits for the first term to end.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	wantErr(t, "second Campaign while leading", e.Campaign(short, "b"), context.DeadlineExceeded)
	cancel()
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "second Resign", e.Resign(ctx), election.ErrNotLeader)
	wantErr(t, "Proclaim after Resign", e.Proclaim(ctx, "x"), election.ErrNotLeader)
	if err := e.Campaign(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if t2, _ := e.Term(); t2.Token() <= term.Token() {
		t.Errorf("new term's token %d is not above the old term's %d", t2.Token(), term.Token())
	}
	events := e.Subscribe(ctx)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Close released the term: Released arrives, then the channel closes.
	var got []primitives.Event
	for ev := range events {
		got = append(got, ev)
	}
	if len(got) == 0 || fmt.Sprintf("%T", got[len(got)-1]) != "primitives.Released" {
		t.Errorf("events after Close of a leader: %v, want ending with Released", got)
	}
	wantErr(t, "second Close", e.Close(), primitives.ErrClosed)
	wantErr(t, "Err after Close", e.Err(), primitives.ErrClosed)
	wantErr(t, "Campaign after Close", e.Campaign(ctx, "d"), primitives.ErrClosed)
	wantErr(t, "Proclaim after Close", e.Proclaim(ctx, "d"), primitives.ErrClosed)
	wantErr(t, "Resign after Close", e.Resign(ctx), primitives.ErrClosed)
	_, err = e.Leader(ctx)
	wantErr(t, "Leader after Close", err, primitives.ErrClosed)
	if _, ok := e.Term(); ok {
		t.Error("Term after Close reports a term")
	}
	for range e.Observe(ctx) {
		t.Error("Observe after Close delivered a state")
	}
	for range e.Subscribe(ctx) {
		t.Error("Subscribe after Close delivered an event")
	}
	if !isDone(e.Done()) {
		t.Error("Done not closed after Close")
	}
	noKeys(t, cli, root)
}

func TestMisuseRWLock(t *testing.T) {
	cli, root := misuseClient(t)
	ctx := ctx10(t)
	sess, err := etcdio.NewSession(cli, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := etcdio.NewRWLock(cli, root+"rw", etcdio.WithSession(sess))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "RUnlock while holding the write lock", l.RUnlock(ctx), rwlock.ErrNotHeld)
	_, err = l.TryRLock(ctx)
	wantErr(t, "TryRLock by the writer itself", err, rwlock.ErrRWLockTaken)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "second Unlock", l.Unlock(ctx), rwlock.ErrNotHeld)
	wantErr(t, "Release of the released write grant", l.Release(ctx, gw), rwlock.ErrNotHeld)
	gr, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gr.Token() <= gw.Token() {
		t.Errorf("reader's token %d not above the previous writer's %d", gr.Token(), gw.Token())
	}
	// Created names the hold: the held grant's key, mode and token with an
	// ended grant's Created are not the hold.
	forged := gr
	forged.Created = gw.Created
	wantErr(t, "Release of the held grant's fields with an ended grant's Created", l.Release(ctx, forged), rwlock.ErrNotHeld)

	// Closing the shared session ends the primitive holding a read grant:
	// its calls fail with ErrClosed, and nothing stays in etcd.
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Err after the session's Close", l.Err(), primitives.ErrClosed)
	wantErr(t, "RUnlock after the session's Close", l.RUnlock(ctx), primitives.ErrClosed)
	_, err = l.RLock(ctx)
	wantErr(t, "RLock after the session's Close", err, primitives.ErrClosed)
	if err := l.Close(); err != nil {
		t.Errorf("Close after the session's Close: %v", err)
	}
	wantErr(t, "second Close", l.Close(), primitives.ErrClosed)

	// Its own session, closed while a writer waits behind a reader.
	a, err := etcdio.NewRWLock(cli, root+"rw2", etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := etcdio.NewRWLock(cli, root+"rw2", etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := b.Lock(ctx); waiting <- err }()
	if !eventually(5*time.Second, func() bool {
		resp, err := cli.Get(ctx, root+"rw2/write/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 1
	}) {
		t.Fatal("the writer never queued")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Lock waiting when Close was called", <-waiting, primitives.ErrClosed)
	for what, err := range map[string]error{
		"Lock":     func() error { _, err := b.Lock(ctx); return err }(),
		"TryLock":  func() error { _, err := b.TryLock(ctx); return err }(),
		"RLock":    func() error { _, err := b.RLock(ctx); return err }(),
		"TryRLock": func() error { _, err := b.TryRLock(ctx); return err }(),
		"Unlock":   b.Unlock(ctx),
		"RUnlock":  b.RUnlock(ctx),
		"Release":  b.Release(ctx, rwlock.Grant{}),
		"Close":    b.Close(),
	} {
		wantErr(t, what+" after Close", err, primitives.ErrClosed)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	noKeys(t, cli, root)
}

func TestMisuseLockAfterSessionClose(t *testing.T) {
	cli, root := misuseClient(t)
	ctx := ctx10(t)
	sess, err := etcdio.NewSession(cli, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := etcdio.NewLock(cli, root+"l", etcdio.WithSession(sess))
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	events := l.Subscribe(ctx)
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	ev, ok := <-events
	if acq, isAcq := ev.(primitives.Acquired); ok && isAcq && acq.Created == g.Created {
		// The grant's Acquired is published just after Lock returns: a
		// subscription made at once may get it first.
		ev, ok = <-events
	}
	if rel, isRel := ev.(primitives.Released); !ok || !isRel || rel.Key != g.Key {
		t.Errorf("event when the shared session closed: %v, want Released for %s", ev, g.Key)
	}
	wantErr(t, "Unlock", l.Unlock(ctx), primitives.ErrClosed)
	wantErr(t, "Release", l.Release(ctx, g), primitives.ErrClosed)
	_, err = l.TryLock(ctx)
	wantErr(t, "TryLock", err, primitives.ErrClosed)
	if err := l.Close(); err != nil {
		t.Errorf("Close after the session's Close: %v", err)
	}
	wantErr(t, "second Close", l.Close(), primitives.ErrClosed)
	noKeys(t, cli, root)
}

// TestMisuseTokens: the guard, over HTTP and in SQLite, refuses stale,
// replayed, malformed and missing tokens, using real tokens from disco.
func TestMisuseTokens(t *testing.T) {
	cli, root := misuseClient(t)
	ctx := ctx10(t)
	l, err := etcdio.NewLock(cli, root+"tok", etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var toks []fencing.Token
	for range 3 {
		g, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, g.Token())
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g := guard.New()
	srv := httptest.NewServer(g.HTTPMiddleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	send := func(values ...string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		for _, v := range values {
			req.Header.Add(fencing.HTTPHeader, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	for _, c := range []struct {
		what   string
		values []string
		code   int
	}{
		{"the middle token", []string{toks[1].String()}, http.StatusOK},
		{"the first token, replayed below the mark", []string{toks[0].String()}, http.StatusConflict},
		{"the newest token", []string{toks[2].String()}, http.StatusOK},
		{"the newest token again", []string{toks[2].String()}, http.StatusOK},
		{"the middle token, replayed", []string{toks[1].String()}, http.StatusConflict},
		{"no token", nil, http.StatusPreconditionRequired},
		{"a word", []string{"abc"}, http.StatusBadRequest},
		{"a negative token", []string{"-" + toks[2].String()}, http.StatusBadRequest},
		{"zero", []string{"0"}, http.StatusBadRequest},
		{"leading zero", []string{"0" + toks[2].String()}, http.StatusBadRequest},
		{"a plus sign", []string{"+" + toks[2].String()}, http.StatusBadRequest},
		{"inner space", []string{"1 " + toks[2].String()}, http.StatusBadRequest},
		{"two values", []string{toks[2].String(), toks[2].String()}, http.StatusBadRequest},
		{"beyond int64", []string{"9223372036854775808"}, http.StatusBadRequest},
	} {
		code, body := send(c.values...)
		if code != c.code || code != http.StatusOK && strings.TrimSpace(body) == "" {
			t.Errorf("%s: %d %q, want %d with a reason", c.what, code, body, c.code)
		}
	}
	if g.Mark() != toks[2] {
		t.Errorf("mark %d after rejected requests, want %d", g.Mark(), toks[2])
	}
	// A guard restored from a persisted mark refuses the old tokens at once.
	restored := guard.New(guard.WithInitialMark(g.Mark()))
	wantErr(t, "replay to a restored guard", restored.Check(toks[1]), fencing.ErrTokenStale)
	wantErr(t, "zero token", restored.Check(0), fencing.ErrNoToken)

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	noKeys(t, cli, root)
}
