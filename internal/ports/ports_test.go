package ports

import (
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/gofrs/flock"
)

func TestReserveBelowEphemeralRange(t *testing.T) {
	r, err := Reserve(5)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	ps := r.Ports()
	if len(ps) != 5 {
		t.Fatalf("got %d ports, want 5", len(ps))
	}
	lo := EphemeralStart()
	for _, p := range ps {
		if p >= lo || p < 1024 {
			t.Errorf("port %d is not below the ephemeral range (from %d)", p, lo)
		}
		// Free: a server can listen on it.
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("reserved port %d: %v", p, err)
			continue
		}
		_ = ln.Close()
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ps)))) != len(ps) {
		t.Errorf("ports not distinct: %v", ps)
	}
}

// No reservation gets a port another holds, until that one is released.
func TestReservationsDoNotShare(t *testing.T) {
	const n = 200
	a, err := Reserve(n)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Reserve(n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	held := make(map[int]bool)
	for _, p := range a.Ports() {
		held[p] = true
	}
	for _, p := range b.Ports() {
		if held[p] {
			t.Fatalf("port %d reserved twice", p)
		}
	}
	for p := range held {
		f := flock.New(filepath.Join(lockDir(), strconv.Itoa(p)))
		ok, err := f.TryLock()
		_ = f.Close()
		if ok || err != nil {
			t.Fatalf("port %d of a reservation: another lock got it (%v, %v)", p, ok, err)
		}
	}
	a.Release()
	a.Release() // harmless
	// Released ports can be reserved again: their locks are free, but for
	// any that a test server of another process has reserved since.
	free := 0
	for p := range held {
		f := flock.New(filepath.Join(lockDir(), strconv.Itoa(p)))
		ok, err := f.TryLock()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			free++
		}
		_ = f.Close()
	}
	if free < n/2 {
		t.Errorf("%d of %d ports still locked after Release", n-free, n)
	}
}

func TestReserveNothing(t *testing.T) {
	if _, err := Reserve(0); err == nil {
		t.Fatal("Reserve(0) succeeded")
	}
}
