package guard_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/storetest"
)

// TestFleetOnFileStore: the store suite's fleet checks, on the file store,
// with the replicas' stores counting their calls.
func TestFleetOnFileStore(t *testing.T) {
	storetest.Fleet(t, t.TempDir(), nil, func(dir string) (guard.MarkStore, func(), error) {
		s, err := fileStoreErr(dir)
		return s, func() {}, err
	})
}

// TestFleetSupersedesInFlight: a replica that learns from the store that
// another replica admitted a higher token rejects its own token and
// cancels its requests in flight with a lower one, as if it had seen the
// higher token itself.
func TestFleetSupersedesInFlight(t *testing.T) {
	dir := t.TempDir()
	a := guard.New(guard.WithStore(fileStore(t, dir)))
	b := guard.New(guard.WithStore(fileStore(t, dir)))
	ctx, done := admit(t, b, 50)
	defer done()
	if err := a.Check(100); err != nil {
		t.Fatal(err)
	}
	alive(t, ctx, "b's request with 50 before b met the store again")
	if err := b.Check(50); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("b: Check(50) after a admitted 100: %v, want stale", err)
	}
	mustStale(t, ctx, "b's request with 50")
	if m := b.Mark(); m != 100 {
		t.Fatalf("b's mark %d, want 100 (read from the store)", m)
	}
}

// TestFleetEqualTokenReadsStore: on a shared store every token equal to
// the mark reads the store (and never writes it); with WithExclusiveStore
// it costs nothing.
func TestFleetEqualTokenReadsStore(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		store := &countingLoads{MarkStore: fileStore(t, t.TempDir())}
		opts := []guard.Option{guard.WithStore(store)}
		if exclusive {
			opts = append(opts, guard.WithExclusiveStore())
		}
		k := guard.NewKeyed(opts...)
		if err := k.Check("/s", 7); err != nil {
			t.Fatal(err)
		}
		loads, raises := store.loads.Load(), store.raises.Load()
		for range 10 {
			if err := k.Check("/s", 7); err != nil {
				t.Fatal(err)
			}
		}
		gotLoads, gotRaises := store.loads.Load()-loads, store.raises.Load()-raises
		wantLoads := int64(10)
		if exclusive {
			wantLoads = 0
		}
		if gotLoads != wantLoads || gotRaises != 0 {
			t.Errorf("exclusive %v: 10 checks at the mark made %d loads and %d raises, want %d and 0", exclusive, gotLoads, gotRaises, wantLoads)
		}
	}
}

// TestExclusiveStoreIsBlindToOtherGuards shows what WithExclusiveStore's
// assertion buys and costs when it is false: a second guard on the same
// store raises the mark, and the exclusive guard still admits the older
// token from memory. (This is why sharing is the default.)
func TestExclusiveStoreIsBlindToOtherGuards(t *testing.T) {
	dir := t.TempDir()
	blind := guard.New(guard.WithStore(fileStore(t, dir)), guard.WithExclusiveStore())
	other := guard.New(guard.WithStore(fileStore(t, dir)))
	if err := blind.Check(50); err != nil {
		t.Fatal(err)
	}
	if err := other.Check(100); err != nil {
		t.Fatal(err)
	}
	if err := blind.Check(50); err != nil {
		t.Fatalf("the exclusive guard at its own mark: %v (it does not read the store)", err)
	}
	// A restart reads the store: the exclusive guard then knows 100.
	restarted := guard.New(guard.WithStore(fileStore(t, dir)), guard.WithExclusiveStore())
	if err := restarted.Check(50); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("a restarted exclusive guard: Check(50) below the stored 100: %v", err)
	}
}

// TestFleetNeverAnswersFromAnOlderRead: a request whose token equals the
// mark is answered by a read of the store that began after the request
// did, never by one already in flight, which may predate another replica's
// raise. The first read here takes the stored mark before the other
// replica raises it, and is held until a second request has arrived; the
// second request must see the raise.
func TestFleetNeverAnswersFromAnOlderRead(t *testing.T) {
	dir := t.TempDir()
	slow := &heldReads{MarkStore: fileStore(t, dir), taken: make(chan struct{}, 1)}
	b := guard.NewKeyed(guard.WithStore(slow))
	a := guard.NewKeyed(guard.WithStore(fileStore(t, dir)))
	if err := b.Check("/s", 50); err != nil {
		t.Fatal(err)
	}
	release := slow.hold()
	first := make(chan error, 1)
	go func() { first <- b.Check("/s", 50) }()
	recv(t, slow.taken, "the first read taking the mark")
	if err := a.Check("/s", 100); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- b.Check("/s", 50) }()
	notYet(t, second, "the second request's answer, while the first read is held")
	release()
	// The first request overlaps the raise: accepted (by its read from
	// before the raise) or stale (the second read may land first) are
	// both right.
	if err := recv(t, first, "the first request"); err != nil && !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("the first request: %v", err)
	}
	if err := recv(t, second, "the second request"); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("the second request, which arrived after the raise to 100: %v, want stale", err)
	}
}

// heldReads is a store whose Loads, while held, read the mark and then
// wait before they return it, as a slow network reply does.
type heldReads struct {
	guard.MarkStore
	mu    sync.Mutex
	gate  chan struct{}
	taken chan struct{}
}

func (h *heldReads) hold() (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gate := make(chan struct{})
	h.gate = gate
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.gate = nil
			h.mu.Unlock()
			close(gate)
		})
	}
}

func (h *heldReads) Load(ctx context.Context, scope string) (fencing.Token, error) {
	m, err := h.MarkStore.Load(ctx, scope)
	h.mu.Lock()
	gate := h.gate
	h.mu.Unlock()
	if gate != nil {
		select {
		case h.taken <- struct{}{}:
		default:
		}
		<-gate
	}
	return m, err
}
