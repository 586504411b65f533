package main

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/primitives/lock"
)

// status lists the holder first and the waiters in the order they queued,
// with their leases' remaining TTL, as a table and as JSON.
func TestStatusShowsWaitersInOrder(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 20*time.Second)
	var leases []string
	var locks []lock.Service
	for range 3 {
		s, err := etcdio.NewSession(cli, etcdio.WithTTL(7*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		l, err := etcdio.NewLock(cli, name, etcdio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		leases = append(leases, leaseHex(int64(s.LeaseID())))
		locks = append(locks, l)
	}
	if _, err := locks[0].Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	for i, l := range locks[1:] {
		go func() { _, _ = l.Lock(waitCtx) }()
		awaitKeys(t, cli, name, i+2) // queue them one after another
	}

	code, out, errOut := runDisco(t, 10*time.Second, "status", name, "--json")
	if code != 0 {
		t.Fatalf("exit status %d: %s", code, errOut)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if r.Kind != kindLock || len(r.Queue) != 3 {
		t.Fatalf("status %+v, want a lock with 3 keys", r)
	}
	for i, e := range r.Queue {
		role := "waiter"
		if i == 0 {
			role = "holder"
		}
		if e.Position != i+1 || e.Role != role || e.Lease != leases[i] {
			t.Fatalf("entry %d: %+v, want %s on lease %s", i, e, role, leases[i])
		}
		if e.LeaseTTL == nil || *e.LeaseTTL <= 0 || *e.LeaseTTL > 7 || e.LeaseGrantedTTL != 7 {
			t.Fatalf("entry %d: lease TTL %v of %d, want (0, 7] of 7", i, e.LeaseTTL, e.LeaseGrantedTTL)
		}
		if i > 0 && e.CreatedRevision <= r.Queue[i-1].CreatedRevision {
			t.Fatalf("entries out of creation order: %+v", r.Queue)
		}
	}

	code, out, errOut = runDisco(t, 10*time.Second, "status", name)
	if code != 0 {
		t.Fatalf("exit status %d: %s", code, errOut)
	}
	table := `(?s)CREATED.*\n1 +holder +"" +\d+ +\S+ +` + leases[0] + ` +\d+s/7s\n2 +waiter .*` + leases[1] +
		`.*\n3 +waiter .*` + leases[2] + `.*lock's token is issued at acquisition and not stored`
	if !regexp.MustCompile(table).MatchString(out) {
		t.Fatalf("table does not match %s:\n%s", table, out)
	}
}

// status tells an election and an rwlock from their key layouts.
func TestStatusKinds(t *testing.T) {
	noLeaks(t)
	ctx := testCtx(t, 20*time.Second)
	cli := newClient(t)

	el := nameOf(t) + "/election"
	cand := newCandidate(t, el)
	if err := cand.Campaign(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	term, _ := cand.Term()
	code, out, errOut := runDisco(t, 10*time.Second, "status", el)
	want := `(?s)election \(kind from layout\).*\n1 +leader +"alpha" +` + regexp.QuoteMeta(term.FencingToken.String())
	if code != 0 || !regexp.MustCompile(want).MatchString(out) {
		t.Fatalf("status %d %s; stdout:\n%s\nwant %s", code, errOut, out, want)
	}

	// --kind overrides the layout.
	code, out, errOut = runDisco(t, 10*time.Second, "status", el, "--kind", "lock")
	if code != 0 || !regexp.MustCompile(`(?s)lock \(kind from flag\).*\n1 +holder `).MatchString(out) {
		t.Fatalf("status --kind lock: %d %s; stdout:\n%s", code, errOut, out)
	}

	rw := nameOf(t) + "/rwlock"
	t.Cleanup(func() { _ = etcdio.RetireRWLock(context.Background(), cli, rw) })
	writer, err := etcdio.NewRWLock(cli, rw, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	g, err := writer.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runDisco(t, 10*time.Second, "status", rw)
	want = `(?s)rwlock \(kind from layout\).*\n1 +holder +write .*epoch ` + regexp.QuoteMeta(rw) + `.epoch: last advanced by a write, at revision ` + g.FencingToken.String()
	if code != 0 || !regexp.MustCompile(want).MatchString(out) {
		t.Fatalf("status %d %s; stdout:\n%s\nwant %s", code, errOut, out, want)
	}
	if err := writer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// classify applies each kind's rule for who holds.
func TestClassify(t *testing.T) {
	kv := func(key string, created int64, value string) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(key), CreateRevision: created, Value: []byte(value)}
	}
	rw := []*mvccpb.KeyValue{kv("p/read/c", 12, ""), kv("p/read/a", 10, ""), kv("p/write/b", 11, "")}
	if k := detectKind("p", rw, nil); k != kindRWLock {
		t.Fatalf("kind %q, want rwlock", k)
	}
	var roles []string
	for _, e := range classify("p", kindRWLock, rw) {
		roles = append(roles, e.Key+" "+e.Mode+" "+e.Role)
	}
	want := []string{"p/read/a read holder", "p/write/b write waiter", "p/read/c read waiter"}
	if len(roles) != 3 || roles[0] != want[0] || roles[1] != want[1] || roles[2] != want[2] {
		t.Fatalf("roles %q, want %q", roles, want)
	}
	el := []*mvccpb.KeyValue{kv("p/b", 5, "x"), kv("p/a", 4, "y")}
	if k := detectKind("p", el, nil); k != kindElection {
		t.Fatalf("kind %q, want election", k)
	}
	if e := classify("p", kindElection, el); e[0].Role != "leader" || e[0].Token != 4 || e[1].Role != "candidate" || e[1].Token != 0 {
		t.Fatalf("election entries %+v", e)
	}
	if k := detectKind("p", []*mvccpb.KeyValue{kv("p/a", 4, "")}, nil); k != kindLock {
		t.Fatalf("kind %q, want lock", k)
	}
	if k := detectKind("p", nil, nil); k != "" {
		t.Fatalf("kind %q of nothing, want none", k)
	}
}
