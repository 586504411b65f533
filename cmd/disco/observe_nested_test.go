package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// observe NAME never takes the key of a name nested under it for NAME's
// leader: with only a lock held on NAME/x, nobody leads NAME.
func TestObserveIgnoresNestedNames(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	putKey(t, cli, name+"/x/"+leaseHex(1), "")
	p := startDisco(t, "observe", name)
	out := p.stdout.await(t, "\n", 10*time.Second)
	if first, _, _ := strings.Cut(out, "\n"); first != "no leader of "+name {
		t.Fatalf("observe %s printed %q, want no leader (the key %s/x/... is the lock %s/x's)", name, first, name, name)
	}
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr)
	}
}
