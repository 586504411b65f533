package actor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/actor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMailboxNeverBlocksAndKeepsOrder(t *testing.T) {
	mb := actor.NewMailbox[int]()
	const n = 100000
	for i := 0; i < n; i++ { // nobody drains: Post must still return
		if !mb.Post(i) {
			t.Fatal("Post to an open mailbox failed")
		}
	}
	select {
	case <-mb.Ready():
	default:
		t.Fatal("Ready not signalled after Post")
	}
	got := mb.Drain(nil)
	if len(got) != n {
		t.Fatalf("drained %d, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("message %d is %d: order lost", i, v)
		}
	}
	mb.Close()
	if mb.Post(1) {
		t.Fatal("Post after Close succeeded")
	}
}

// loop is a minimal actor: it runs posted functions until stopped closes.
func loop(t *testing.T) (*actor.Mailbox[func()], chan struct{}) {
	mb := actor.NewMailbox[func()]()
	stopped := make(chan struct{})
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var batch []func()
		for {
			select {
			case <-mb.Ready():
				batch = mb.Drain(batch)
				for _, f := range batch {
					f()
				}
			case <-quit:
				return
			}
		}
	}()
	t.Cleanup(func() { close(quit); <-done })
	return mb, stopped
}

func TestCallAnswer(t *testing.T) {
	mb, stopped := loop(t)
	v, err := actor.Call(context.Background(), stopped, func(r actor.Reply[int]) bool {
		return mb.Post(func() { r.Answer(42, nil) })
	})
	if v != 42 || err != nil {
		t.Fatalf("Call = %d, %v", v, err)
	}
}

func TestCallCallerGivesUp(t *testing.T) {
	mb, stopped := loop(t)
	ctx, cancel := context.WithCancel(context.Background())
	parked := make(chan actor.Reply[int], 1)
	res := make(chan error, 1)
	go func() {
		_, err := actor.Call(ctx, stopped, func(r actor.Reply[int]) bool {
			return mb.Post(func() { parked <- r }) // the loop keeps the reply for later
		})
		res <- err
	}()
	r := <-parked
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("Call returned %v, want context.Canceled", err)
	}
	if !actor.Abandoned(r) {
		t.Fatal("reply not marked abandoned")
	}
	if r.Answer(1, nil) {
		t.Fatal("Answer to a caller that gave up reported delivered: the loop would not undo its work")
	}
}

func TestCallAnswerBeatsLateCancel(t *testing.T) {
	mb, stopped := loop(t)
	ctx, cancel := context.WithCancel(context.Background())
	v, err := actor.Call(ctx, stopped, func(r actor.Reply[int]) bool {
		return mb.Post(func() {
			if !r.Answer(7, nil) {
				t.Error("answer refused")
			}
			cancel() // the caller's ctx ends right after the answer
		})
	})
	if err != nil || v != 7 {
		t.Fatalf("an answer that was delivered must be returned: %d, %v", v, err)
	}
}

func TestCallLoopStopped(t *testing.T) {
	stopped := make(chan struct{})
	close(stopped)
	_, err := actor.Call(context.Background(), stopped, func(actor.Reply[int]) bool { return true })
	if !errors.Is(err, actor.ErrStopped) {
		t.Fatalf("Call to a stopped loop: %v", err)
	}
	_, err = actor.Call(context.Background(), make(chan struct{}), func(actor.Reply[int]) bool { return false })
	if !errors.Is(err, actor.ErrStopped) {
		t.Fatalf("Call whose post failed: %v", err)
	}
}

type ev struct {
	coalescable bool
	n           int
}

func newFanout() *actor.Fanout[ev] {
	return actor.NewFanout(func(e ev) bool { return e.coalescable })
}

func TestFanoutSlowSubscriberNeverBlocksPublish(t *testing.T) {
	f := newFanout()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := f.Subscribe(ctx) // never read until the end
	const n = 50000
	for i := 0; i < n; i++ {
		f.Publish(ev{n: i})
	}
	for i := 0; i < n; i++ {
		if e := <-ch; e.n != i {
			t.Fatalf("event %d is %d: must-deliver events dropped or reordered", i, e.n)
		}
	}
	f.Close()
	if _, ok := <-ch; ok {
		t.Fatal("channel not closed after Close")
	}
	actor.WaitFanout(f)
}

func TestFanoutCoalescesOnlyCoalescable(t *testing.T) {
	f := newFanout()
	ch := f.Subscribe(context.Background())
	// While the subscriber is not reading: a must-deliver event, a burst of
	// coalescable ones, another must-deliver, another burst.
	f.Publish(ev{n: 0})
	for i := 1; i <= 100; i++ {
		f.Publish(ev{coalescable: true, n: i})
	}
	f.Publish(ev{n: 101})
	for i := 102; i <= 200; i++ {
		f.Publish(ev{coalescable: true, n: i})
	}
	f.Close()
	var got []ev
	for e := range ch {
		got = append(got, e)
	}
	var plain []int
	last := -1
	for _, e := range got {
		if e.n <= last {
			t.Fatalf("events out of order: %v", got)
		}
		last = e.n
		if !e.coalescable {
			plain = append(plain, e.n)
		}
	}
	if len(plain) != 2 || plain[0] != 0 || plain[1] != 101 {
		t.Fatalf("must-deliver events %v, want [0 101]", plain)
	}
	if got[len(got)-1].n != 200 {
		t.Fatalf("latest coalescable event not delivered: last is %v", got[len(got)-1])
	}
	if len(got) > 10 {
		t.Fatalf("%d events delivered to a reader that read nothing during the bursts: not coalesced", len(got))
	}
	actor.WaitFanout(f)
}

// A coalescable event that would replace the tail with the very event
// queued just before it drops the tail instead: a reader that has not read
// the state A, then A changes to B and back to A, sees A once, not twice
// in a row (an Observe that reported "no leader" twice).
func TestFanoutCoalescingNeverRepeats(t *testing.T) {
	f := newFanout()
	ch := f.Subscribe(context.Background())
	a, b := ev{coalescable: true, n: 1}, ev{coalescable: true, n: 2}
	f.Publish(a)
	f.Publish(b)
	f.Publish(a)
	f.Publish(ev{n: 3})
	f.Publish(b)
	f.Publish(a)
	f.Close()
	var got []ev
	for e := range ch {
		got = append(got, e)
	}
	wantStates(t, got, a)
	actor.WaitFanout(f)
}

// wantStates fails t unless the coalescable events of got (the states)
// end with last and never have one twice in a row.
func wantStates(t *testing.T, got []ev, last ev) {
	t.Helper()
	var states []ev
	for _, e := range got {
		if e.coalescable {
			states = append(states, e)
		}
	}
	for i := 1; i < len(states); i++ {
		if states[i] == states[i-1] {
			t.Fatalf("delivered %v: state %v twice in a row", got, states[i])
		}
	}
	if len(states) == 0 || states[len(states)-1] != last {
		t.Fatalf("delivered %v: the last state, %v, missing", got, last)
	}
}

// The coalescable events a reader receives never repeat one state twice
// in a row, also when must-deliver events come between them: the reader
// who has A, then an event of another kind, must not get A again because
// the B published meanwhile was replaced by a return to A (a leader's
// LeaderChanged told twice around a Suspended, its Proclaim undone).
func TestFanoutCoalescingNeverRepeatsAcrossOthers(t *testing.T) {
	a, b := ev{coalescable: true, n: 1}, ev{coalescable: true, n: 2}
	for _, read := range []bool{false, true} { // A still queued, or read
		f := newFanout()
		ch := f.Subscribe(context.Background())
		f.Publish(a)
		if read {
			if e := <-ch; e != a {
				t.Fatalf("first event %v, want %v", e, a)
			}
		}
		f.Publish(ev{n: 3})
		f.Publish(b)
		f.Publish(a)
		f.Close()
		var got []ev
		if read {
			got = append(got, a)
		}
		for e := range ch {
			got = append(got, e)
		}
		wantStates(t, got, a)
		actor.WaitFanout(f)
	}
}

func TestFanoutSubscribeFirstAndCancel(t *testing.T) {
	f := newFanout()
	ctx, cancel := context.WithCancel(context.Background())
	ch := f.Subscribe(ctx, ev{n: -1})
	if e := <-ch; e.n != -1 {
		t.Fatalf("first event %v, want the initial one", e)
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("event after cancel")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed after ctx ended")
	}
	f.Publish(ev{n: 1}) // no subscriber left: must not block
	f.Close()
	actor.WaitFanout(f)
	if _, ok := <-f.Subscribe(context.Background()); ok {
		t.Fatal("Subscribe after Close returned an open channel")
	}
}
