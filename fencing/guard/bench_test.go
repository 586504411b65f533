package guard_test

import (
	"context"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// BenchmarkCheckSameToken: every goroutine checks the token equal to the
// mark, as readers sharing one rwlock token do. No atomic write happens.
func BenchmarkCheckSameToken(b *testing.B) {
	g := guard.New(guard.WithInitialMark(42))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := g.Check(42); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCheckIncreasing: one goroutine, every check raises the mark.
func BenchmarkCheckIncreasing(b *testing.B) {
	g := guard.New()
	tok := fencing.Token(0)
	for b.Loop() {
		tok++
		if err := g.Check(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckIncreasingParallel: goroutines race to raise the mark, so
// many of their tokens are stale by the time they are checked.
func BenchmarkCheckIncreasingParallel(b *testing.B) {
	g := guard.New()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = g.Check(g.Mark() + 1)
		}
	})
}

// BenchmarkAdmitSameToken: every goroutine admits the token equal to the
// mark and calls done, a full critical section with no contention between
// tokens.
func BenchmarkAdmitSameToken(b *testing.B) {
	g := guard.New(guard.WithInitialMark(42))
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, done, err := g.Admit(ctx, 42)
			if err != nil {
				b.Error(err)
				return
			}
			done()
		}
	})
}
