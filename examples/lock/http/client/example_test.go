package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/examples/internal/storytest"
	"github.com/ahrtr/disco/examples/lock/http/store"
	"github.com/ahrtr/disco/fencing/guard"
)

// TestMain serves etcd from a child process (or uses ETCD_ENDPOINTS), so
// goleak sees only this process's own goroutines.
func TestMain(m *testing.M) { etcdtest.Main(m) }

func checkOutcome(t *testing.T, o outcome, story string) {
	t.Helper()
	if o.TokenB <= o.TokenA {
		t.Errorf("B's token %d not above A's %d", o.TokenB, o.TokenA)
	}
	if o.ZombieStatus != http.StatusConflict || !strings.Contains(o.ZombieBody, "stale") {
		t.Errorf("zombie write: %d %q, want 409 stale", o.ZombieStatus, o.ZombieBody)
	}
	if o.Final != valueB {
		t.Errorf("final value %q, want B's %q", o.Final, valueB)
	}
	storytest.Mentions(t, "story", story, "Lost", "409 Conflict", "ended as promised")
}

// TestZombieInProcess is `go run ./examples/lock/http/client`.
func TestZombieInProcess(t *testing.T) {
	storytest.NoLeaks(t)
	o, story := storytest.TellWith(t, run, "")
	checkOutcome(t, o, story)
}

// TestZombieSeparateResource is the two-terminal way, with -resource, and
// looks at the resource's guard and data from the outside.
func TestZombieSeparateResource(t *testing.T) {
	storytest.NoLeaks(t)
	g := guard.New()
	var statuses []string
	srv := httptest.NewServer(store.New().Handler(g, func(f string, args ...any) {
		// "PUT /kv/report token=4 -> 204 No Content (mark 4)": keep "204".
		_, after, _ := strings.Cut(fmt.Sprintf(f, args...), "-> ")
		statuses = append(statuses, strings.Fields(after)[0])
	}))
	defer srv.Close()

	o, story := storytest.TellWith(t, run, srv.URL+"/")
	checkOutcome(t, o, story)
	if g.Mark() != o.TokenB {
		t.Errorf("guard mark %d, want B's token %d", g.Mark(), o.TokenB)
	}
	srv.Close() // all handlers have returned: statuses is complete
	if got, want := strings.Join(statuses, " "), "204 204 409 200"; got != want {
		t.Errorf("resource answered %s, want %s", got, want)
	}
}
