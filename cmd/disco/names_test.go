package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A NAME without a leading "/" or with a trailing "/" is refused by every
// command that takes one, with status 2 and a one-line message saying why,
// before disco writes anything.
func TestNamesRefused(t *testing.T) {
	noLeaks(t)
	cli := newClient(t)
	base := strings.TrimPrefix(nameOf(t), "/")
	for _, tc := range []struct {
		name, why string
	}{
		{base + "/rel", `must start with "/"`},
		{"/" + base + "/trail/", `must not end with "/"`},
		{"/", `must not end with "/"`},
	} {
		for _, args := range [][]string{
			{"lock", tc.name, "--", "true"},
			{"elect", tc.name, "v", "--", "true"},
			{"elect", tc.name, "v"},
			{"observe", tc.name},
			{"status", tc.name},
		} {
			t.Run(args[0]+" "+tc.name+" "+strconv.Itoa(len(args)), func(t *testing.T) {
				code, stdout, stderr := runDisco(t, 10*time.Second, args...)
				first, _, _ := strings.Cut(stderr, "\n")
				if code != exitUsage || !strings.Contains(first, strconv.Quote(tc.name)) || !strings.Contains(first, tc.why) {
					t.Fatalf("exit status %d, stderr %q; want %d and a first line naming %q that says %s", code, stderr, exitUsage, tc.name, tc.why)
				}
				if stdout != "" {
					t.Fatalf("stdout %q, want nothing", stdout)
				}
			})
		}
	}
	resp, err := cli.Get(testCtx(t, 5*time.Second), base, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d keys under %q after refused names", resp.Count, base)
	}
}

// -v prints the exact etcd prefix a command uses for NAME.
func TestVerbosePrintsPrefix(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	for _, args := range [][]string{
		{"-v", "lock", name, "--", "true"},
		{"-v", "elect", name, "v", "--", "true"},
		{"-v", "status", name},
	} {
		code, _, stderr := runDisco(t, 10*time.Second, args...)
		want := "etcd prefix " + strconv.Quote(name+"/")
		if code != 0 || !strings.Contains(stderr, want) {
			t.Fatalf("%v: exit status %d, stderr %q; want 0 and %q", args, code, stderr, want)
		}
	}
}

// putKey writes key with value on a new lease, as a holder would, and
// returns the lease, revoked when t ends.
func putKey(t *testing.T, cli *clientv3.Client, key, value string) clientv3.LeaseID {
	t.Helper()
	ctx := testCtx(t, 5*time.Second)
	l, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Revoke(context.Background(), l.ID) })
	if _, err := cli.Put(ctx, key, value, clientv3.WithLease(l.ID)); err != nil {
		t.Fatal(err)
	}
	return l.ID
}

// status NAME shows only NAME's own keys as holders; the keys of names
// nested under it are not NAME's, and status names those names instead.
func TestStatusNestedNames(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	// Only nested names: NAME itself has nobody.
	lk := putKey(t, cli, name+"/sub/"+leaseHex(1), "")
	putKey(t, cli, name+"/sub/"+leaseHex(int64(lk)), "")
	putKey(t, cli, name+"/el/"+leaseHex(2), "candidate")
	putKey(t, cli, name+"/rw/read/"+leaseHex(3), "")
	putKey(t, cli, name+"/rw.epoch", "read")
	putKey(t, cli, name+"/deep/er/"+leaseHex(4), "")

	wantNested := map[string]string{name + "/sub": kindLock, name + "/el": kindElection, name + "/rw": kindRWLock, name + "/deep/er": kindLock}
	checkNested := func(t *testing.T, r report) {
		t.Helper()
		if len(r.Nested) != len(wantNested) {
			t.Fatalf("nested %+v, want %v", r.Nested, wantNested)
		}
		for _, n := range r.Nested {
			if wantNested[n.Name] != n.Kind {
				t.Fatalf("nested %+v, want %v", r.Nested, wantNested)
			}
		}
	}

	code, out, errOut := runDisco(t, 10*time.Second, "status", name, "--json")
	if code != 0 {
		t.Fatalf("exit status %d: %s", code, errOut)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if len(r.Queue) != 0 || r.Kind != "" {
		t.Fatalf("status of %s lists %+v (kind %q) as its own; want nothing of its own", name, r.Queue, r.Kind)
	}
	checkNested(t, r)

	code, out, errOut = runDisco(t, 10*time.Second, "status", name)
	if code != 0 || strings.Contains(out, "holder") || !strings.Contains(out, "nobody holds") ||
		!strings.Contains(out, "nested: "+name+"/sub (lock, 2 keys)") || !strings.Contains(out, "nested: "+name+"/rw (rwlock, 2 keys)") {
		t.Fatalf("exit status %d %s; stdout:\n%s", code, errOut, out)
	}

	// NAME's own holder besides the nested names.
	own := putKey(t, cli, name+"/"+leaseHex(5), "")
	code, out, errOut = runDisco(t, 10*time.Second, "status", name, "--json")
	if code != 0 {
		t.Fatalf("exit status %d: %s", code, errOut)
	}
	r = report{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if r.Kind != kindLock || len(r.Queue) != 1 || r.Queue[0].Role != "holder" || r.Queue[0].Lease != leaseHex(int64(own)) {
		t.Fatalf("status %+v, want one holder on lease %s", r, leaseHex(int64(own)))
	}
	checkNested(t, r)
}
