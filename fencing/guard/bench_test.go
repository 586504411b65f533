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

// BenchmarkKeyedAdmitSameToken: Admit+done of the current token of one
// scope, in memory and on a file store: the steady state of a stored keyed
// guard, which does no store access.
func BenchmarkKeyedAdmitSameToken(b *testing.B) {
	for _, stored := range []bool{false, true} {
		name := "memory"
		var opts []guard.Option
		if stored {
			name = "file-store"
			opts = append(opts, guard.WithStore(fileStore(b, b.TempDir())))
		}
		b.Run(name, func(b *testing.B) {
			k := guard.NewKeyed(opts...)
			if err := k.Check("/bench", 42); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, done, err := k.Admit(ctx, "/bench", 42)
					if err != nil {
						b.Error(err)
						return
					}
					done()
				}
			})
		})
	}
}

// BenchmarkFileStoreRaise: the cost of one durable mark raise in a file
// store (write, fsync, rename, directory fsync).
func BenchmarkFileStoreRaise(b *testing.B) {
	s := fileStore(b, b.TempDir())
	ctx := context.Background()
	tok := fencing.Token(0)
	for b.Loop() {
		tok++
		if err := s.Raise(ctx, "/bench", tok); err != nil {
			b.Fatal(err)
		}
	}
}
