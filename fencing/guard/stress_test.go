package guard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// op is one Check observed by TestCheckConcurrentModel.
type op struct {
	tok       fencing.Token
	accepted  bool
	inv, resp int64         // global logical times of invocation and response
	before    fencing.Token // Mark() read just before the call
	after     fencing.Token // Mark() read just after it
}

// TestCheckConcurrentModel hammers Check from 8 goroutines with random,
// slowly rising tokens and checks every observed history against the
// sequential specification "accept t iff t >= mark; on accept mark = t".
// With inv/resp taken from one atomic clock, an operation's linearization
// point lies between its inv and resp. Necessary conditions checked:
//
//  1. Mark() readings never go down, per goroutine.
//  2. Accepted t: the mark was <= t at the linearization point, so the
//     reading before is <= t, the reading after is >= t, and no accepted
//     token > t had responded before t was invoked.
//  3. Rejected t: the mark was > t at the linearization point, so the
//     reading after is > t, and some accepted token > t was invoked before
//     t responded (marks come only from accepted tokens).
//  4. The final mark is the largest token offered, and it was accepted.
func TestCheckConcurrentModel(t *testing.T) {
	const (
		workers = 8
		perG    = 4000
	)
	g := guard.New()
	var clock atomic.Int64
	histories := make([][]op, workers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 99))
			h := make([]op, 0, perG)
			<-start
			for i := range perG {
				// Tokens around the current mark, so there are accepts
				// of higher and equal tokens, and rejects.
				before := g.Mark()
				tok := max(1, before+fencing.Token(r.IntN(7)-3))
				o := op{tok: tok, before: before}
				o.inv = clock.Add(1)
				err := g.Check(tok)
				o.resp = clock.Add(1)
				o.after = g.Mark()
				switch {
				case err == nil:
					o.accepted = true
				case errors.Is(err, fencing.ErrTokenStale):
				default:
					t.Errorf("Check(%d): unexpected error %v", tok, err)
				}
				h = append(h, o)
				if i%64 == 0 {
					runtime.Gosched()
				}
			}
			histories[w] = h
		}()
	}
	close(start)
	wg.Wait()

	var all, accepted []op
	var maxOffered fencing.Token
	for w, h := range histories {
		last := fencing.Token(0)
		for _, o := range h {
			if o.before < last || o.after < o.before {
				t.Fatalf("goroutine %d saw the mark go down: %d, then %d, then %d", w, last, o.before, o.after)
			}
			last = o.after
			maxOffered = max(maxOffered, o.tok)
			all = append(all, o)
			if o.accepted {
				accepted = append(accepted, o)
				if o.before > o.tok || o.after < o.tok {
					t.Fatalf("accepted %d with mark %d before and %d after", o.tok, o.before, o.after)
				}
			} else if o.after <= o.tok {
				t.Fatalf("rejected %d but the mark after was %d", o.tok, o.after)
			}
		}
	}

	// byResp: accepted ops in response order with the running max token,
	// to find the largest accepted token that responded before a time.
	byResp := slices.Clone(accepted)
	slices.SortFunc(byResp, func(a, b op) int { return int(a.resp - b.resp) })
	respMax := make([]fencing.Token, len(byResp))
	// byInv: the same in invocation order.
	byInv := slices.Clone(accepted)
	slices.SortFunc(byInv, func(a, b op) int { return int(a.inv - b.inv) })
	invMax := make([]fencing.Token, len(byInv))
	var m1, m2 fencing.Token
	for i := range accepted {
		m1 = max(m1, byResp[i].tok)
		respMax[i] = m1
		m2 = max(m2, byInv[i].tok)
		invMax[i] = m2
	}
	// maxBefore returns the largest token among ops whose time key is < at.
	maxBefore := func(ops []op, maxes []fencing.Token, key func(op) int64, at int64) fencing.Token {
		i, _ := slices.BinarySearchFunc(ops, at, func(o op, at int64) int { return int(key(o) - at) })
		if i == 0 {
			return 0
		}
		return maxes[i-1]
	}
	var rejected int
	for _, o := range all {
		if o.accepted {
			if m := maxBefore(byResp, respMax, func(o op) int64 { return o.resp }, o.inv); m > o.tok {
				t.Fatalf("accepted %d although %d had been accepted before it was invoked", o.tok, m)
			}
			continue
		}
		rejected++
		if m := maxBefore(byInv, invMax, func(o op) int64 { return o.inv }, o.resp); m <= o.tok {
			t.Fatalf("rejected %d although no higher token was accepted before it responded (max %d)", o.tok, m)
		}
	}
	if final := g.Mark(); final != maxOffered || m1 != maxOffered {
		t.Fatalf("final mark %d, max accepted %d, max offered %d", final, m1, maxOffered)
	}
	if len(accepted) == 0 || rejected == 0 {
		t.Fatalf("degenerate history: %d accepted, %d rejected", len(accepted), rejected)
	}
	t.Logf("%d ops: %d accepted, %d rejected", len(all), len(accepted), rejected)
}

// TestAdmitMutualExclusion runs Admit from 8 goroutines with random tokens
// and checks that critical sections of different tokens never overlap: at
// any moment the requests inside hold one token. Requests leave the
// critical section (and call done) promptly, as the contract asks, and some
// linger until their context is cancelled by a higher token.
func TestAdmitMutualExclusion(t *testing.T) {
	const (
		workers = 8
		perG    = 1500
	)
	g := guard.New()
	var (
		mu     sync.Mutex
		inside = map[fencing.Token]int{}
	)
	var admitted, stale atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range perG {
				tok := max(1, g.Mark()+fencing.Token(r.IntN(5)-2))
				ctx, done, err := g.Admit(context.Background(), tok)
				if err != nil {
					if !errors.Is(err, fencing.ErrTokenStale) {
						t.Errorf("Admit(%d): %v", tok, err)
					}
					stale.Add(1)
					continue
				}
				admitted.Add(1)
				mu.Lock()
				for other, n := range inside {
					if n > 0 && other != tok {
						t.Errorf("token %d admitted while %d requests with token %d are inside", tok, n, other)
					}
				}
				inside[tok]++
				mu.Unlock()
				if r.IntN(4) == 0 {
					// Linger until fenced out, unless this token stays the
					// highest: then give up the section after a few yields.
					for range 50 {
						if ctx.Err() != nil {
							break
						}
						runtime.Gosched()
					}
				}
				mu.Lock()
				inside[tok]--
				mu.Unlock()
				done()
			}
		}()
	}
	wg.Wait()
	if admitted.Load() == 0 || stale.Load() == 0 {
		t.Fatalf("degenerate run: %d admitted, %d stale", admitted.Load(), stale.Load())
	}
	t.Logf("%d admitted, %d stale, final mark %d", admitted.Load(), stale.Load(), g.Mark())
}
