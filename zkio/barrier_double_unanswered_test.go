package zkio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/zkio"
)

// ZooKeeper's codes of requests the cases below hold back.
const (
	opCreate       = 1
	opExists       = 3
	opGetChildren2 = 12
)

// multiOp returns what one operation of a transaction carries before its
// path: its code, not done, no error.
func multiOp(op int32) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(op))
	return append(b, 0, 0xff, 0xff, 0xff, 0xff)
}

// holdRequests holds at p the first request that carries match, and all
// the client sends after it, until release delivers them: ZooKeeper does
// not answer, then answers everything at once, as over a stalled link that
// did not break. asked is closed once the request is held; release runs at
// t's end too, before p closes.
func holdRequests(t *testing.T, p *partition, match []byte) (asked <-chan struct{}, release func()) {
	ch, free := make(chan struct{}), make(chan struct{})
	var once, freed sync.Once
	release = func() { freed.Do(func() { close(free) }) }
	t.Cleanup(release)
	p.px.ModifyTx(func(b []byte) []byte {
		if bytes.Contains(b, match) {
			once.Do(func() {
				close(ch)
				<-free
			})
		}
		return b
	})
	return ch, release
}

// partyLen is the length of a double barrier's party znode's path.
func partyLen(path string) int { return len(path + "/00000000-0000-0000-0000-000000000000") }

// TestDoubleBarrierGivesUpUnanswered: an Enter or a Leave whose context
// ends while ZooKeeper does not answer one of its requests returns at once
// (an Enter's withdrawal waits withdrawWait at most), with the context's
// error (a Leave whose party has left and clears the round, nil); once
// ZooKeeper answers, what the requests left running wrote is withdrawn on
// the shared session, without Close: no party znode is left by an Enter
// that gave up, and once the parties closed, nothing is under the path.
// The cases: Enter's lookup of a join whose answer was lost, its join, its
// clear of a dead round, its look for ready, its create of ready, its
// withdrawal; Leave's listing, its delete, its watch, its lookup of the
// round's ready, its clear. Before, each of these requests ran on the
// caller's goroutine until ZooKeeper answered.
func TestDoubleBarrierGivesUpUnanswered(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	if _, err := admin.Create("/dbunanswered", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	create := func(t *testing.T, p string, flags int32) {
		t.Helper()
		if _, err := admin.Create(p, nil, flags, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	// A party of admin's, named to be the lowest.
	lowest := func(path string) string { return path + "/00000000-0000-0000-0000-000000000000" }
	type env struct {
		path  string
		d     barrier.DoubleBarrier
		other barrier.DoubleBarrier // a party on servers, if the case has one
	}
	for _, c := range []struct {
		name  string
		count int
		other bool // another party, on servers, enters with d
		// setup runs before d's party enters (if leave) or its Enter.
		setup func(t *testing.T, e *env)
		leave bool // the call is a Leave, once the parties entered
		// cancelFirst: ctx ends once the party waits for ready, before
		// the held request is sent.
		cancelFirst bool
		// poke, if set, is run until the request is held, once the call
		// has begun.
		poke func(t *testing.T, e *env)
		hold func(path string) []byte
		want error // the call's error; nil for none
		// finish runs once ZooKeeper answers again, before the parties
		// close.
		finish func(t *testing.T, ctx context.Context, e *env)
	}{
		{name: "Enter, lookup", count: 2, setup: func(t *testing.T, e *env) {
			_, heal := zkio.LoseJoinReply(e.d)
			heal() // the join's reply is lost, and the lookup goes to ZooKeeper
		}, hold: func(path string) []byte { return asking(opExists, path+"/", partyLen(path)) }, want: context.Canceled},
		{name: "Enter, join", count: 2, hold: func(path string) []byte {
			return append(multiOp(opCreate), asking(0, path+"/", partyLen(path))...)
		}, want: context.Canceled},
		{name: "Enter, dead round", count: 2, setup: func(t *testing.T, e *env) {
			create(t, e.path, 0)
			create(t, e.path+"/ready", 0)
		}, hold: func(path string) []byte { return append(multiOp(opDelete), asking(0, path+"/ready")...) }, want: context.Canceled},
		{name: "Enter, ready look", count: 2, hold: func(path string) []byte {
			return asking(opExists, path+"/ready")
		}, want: context.Canceled},
		{name: "Enter, ready create", count: 1, hold: func(path string) []byte {
			return append(multiOp(opCreate), asking(0, path+"/ready")...)
		}, want: context.Canceled},
		{name: "Enter, withdrawal", count: 2, cancelFirst: true, hold: func(path string) []byte {
			return append(multiOp(opDelete), asking(0, path+"/", partyLen(path))...)
		}, want: context.Canceled},
		{name: "Leave, listing", count: 1, leave: true, hold: func(path string) []byte {
			return asking(opGetChildren2, path)
		}, want: context.Canceled},
		{name: "Leave, delete", count: 1, leave: true, hold: func(path string) []byte {
			return asking(opDelete, path+"/", partyLen(path))
		}, want: context.Canceled},
		{name: "Leave, watch", count: 2, other: true, leave: true, hold: func(path string) []byte {
			return asking(opGetData, path+"/", partyLen(path))
		}, want: context.Canceled},
		{name: "Leave, round", count: 2, leave: true, setup: func(t *testing.T, e *env) {
			create(t, e.path, 0)
			create(t, lowest(e.path), zk.FlagEphemeral)
		}, hold: func(path string) []byte {
			// path's data written since ready: Leave looks ready up.
			if _, err := admin.Set(path, nil, -1); err != nil {
				t.Fatal(err)
			}
			return asking(opExists, path+"/ready")
		}, poke: func(t *testing.T, e *env) {
			// The other party's data changes: its watch fires, and the
			// Leave, out, looks whether its round is over.
			if _, err := admin.Set(lowest(e.path), nil, -1); err != nil {
				t.Fatal(err)
			}
		}, want: context.Canceled, finish: func(t *testing.T, ctx context.Context, e *env) {
			if err := admin.Delete(lowest(e.path), -1); err != nil {
				t.Fatal(err)
			}
			if err := e.d.Leave(ctx); err != nil {
				t.Fatalf("Leave again, the round's other party gone: %v", err)
			}
		}},
		{name: "Leave, clear", count: 1, leave: true, hold: func(path string) []byte {
			return append(multiOp(opDelete), asking(0, path+"/ready")...)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			p, via := newPartition(t, servers[0])
			s, err := zkio.NewSession([]string{via})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			e := &env{path: "/dbunanswered/" + c.name}
			e.d, err = zkio.NewDoubleBarrier(nil, e.path, c.count, zkio.WithSession(s))
			if err != nil {
				t.Fatal(err)
			}
			defer e.d.Close()
			if c.other {
				e.other = testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(servers, e.path, c.count))
			}
			if c.setup != nil {
				c.setup(t, e)
			}
			call := e.d.Enter
			if c.leave {
				entered := make(chan error, 1)
				if e.other != nil {
					go func() { entered <- e.other.Enter(ctx) }()
				} else {
					entered <- nil
				}
				if err := e.d.Enter(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-entered; err != nil {
					t.Fatal(err)
				}
				call = e.d.Leave
			}
			asked, release := holdRequests(t, p, c.hold(e.path))
			defer release()
			cctx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			done := make(chan error, 1)
			go func() { done <- call(cctx) }()
			if c.cancelFirst {
				testkit.Eventually(t, 10*time.Second, "the party in, waiting for ready", func() bool {
					return len(parties(t, admin, e.path)) == 1
				})
				giveUp()
			}
			if c.poke != nil {
				testkit.Eventually(t, 20*time.Second, "the request sent", func() bool {
					select {
					case <-asked:
						return true
					default:
						c.poke(t, e)
						return false
					}
				})
			}
			select {
			case <-asked:
			case <-time.After(20 * time.Second):
				t.Fatal("the call did not send the request")
			}
			giveUp()
			select {
			case err := <-done:
				if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
					t.Fatalf("call whose context ended: %v, want %v", err, c.want)
				}
			case <-time.After(3 * time.Second):
				release()
				t.Fatalf("the call still waits 3s after its context ended, ZooKeeper not answering (%v once it answers)", <-done)
			}
			release()
			if !c.leave {
				testkit.Eventually(t, 20*time.Second, "no party znode left by the Enter that gave up", func() bool {
					return len(parties(t, admin, e.path)) == 0
				})
			}
			if c.finish != nil {
				c.finish(t, ctx, e)
			}
			if err := e.d.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if e.other != nil {
				if err := e.other.Close(); err != nil {
					t.Fatalf("the other party's Close: %v", err)
				}
			}
			testkit.Eventually(t, 20*time.Second, "nothing under the path once the parties closed", func() bool {
				kids, _, err := admin.Children(e.path)
				return err == nil && len(kids) == 0 || errors.Is(err, zk.ErrNoNode)
			})
		})
	}
}
