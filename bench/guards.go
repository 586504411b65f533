package main

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/ctxtime"
)

func guardCheck(g *guard.Guard, t fencing.Token) error { return g.Check(t) }

func guardAdmit(g *guard.Guard, t fencing.Token) error {
	_, done, err := g.Admit(context.Background(), t)
	if err == nil {
		done()
	}
	return err
}

// mutexMark is the naive guard: a high-water mark behind a sync.Mutex.
type mutexMark struct {
	mu   sync.Mutex
	mark fencing.Token
}

func (m *mutexMark) check(t fencing.Token) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t < m.mark {
		return fencing.ErrTokenStale
	}
	m.mark = t
	return nil
}

// raiseEvery is how many operations the first goroutine makes between two
// raises of the token, as if the lock changed hands that often.
const raiseEvery = 100

// runGuard has `goroutines` goroutines call op for cfg.duration. They all
// present the current token; the first one raises it every raiseEvery calls,
// so the others now and then present a stale one (counted as Rejected).
func runGuard(ctx context.Context, name string, goroutines int, op func(fencing.Token) error, cfg runCfg) *side {
	s := &side{Lib: name}
	var errs errCount
	var epoch atomic.Int64
	epoch.Store(1)
	var recording, stopped atomic.Bool
	var count, rejected atomic.Int64
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			var n, rej int64
			for k := 0; ; k++ {
				if k%256 == 0 && stopped.Load() {
					break
				}
				if i == 0 && k%raiseEvery == 0 {
					epoch.Add(1)
				}
				err := op(fencing.Token(epoch.Load()))
				if !recording.Load() {
					continue
				}
				switch {
				case err == nil:
					n++
				case errors.Is(err, fencing.ErrTokenStale):
					rej++
				default:
					errs.add(err)
				}
			}
			count.Add(n)
			rejected.Add(rej)
		})
	}
	ctxtime.Sleep(ctx, cfg.warmup)
	recording.Store(true)
	start := time.Now()
	ctxtime.Sleep(ctx, cfg.duration)
	recording.Store(false)
	s.Window = time.Since(start)
	stopped.Store(true)
	wg.Wait()
	s.Count = int(count.Load() + rejected.Load())
	s.Rejected = int(rejected.Load())
	s.rate()
	errs.into(s)
	return s
}
