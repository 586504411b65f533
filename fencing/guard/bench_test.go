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
// scope, in memory, on a file store the guard alone uses (exclusive: no
// store access, the "within 2x of in-memory" goal), and on a file store
// shared with other guards (the default: one store read per request,
// shared by the requests that arrive while one is in flight).
func BenchmarkKeyedAdmitSameToken(b *testing.B) {
	for _, c := range []struct {
		name string
		opts func() []guard.Option
	}{
		{"memory", func() []guard.Option { return nil }},
		{"file-store", func() []guard.Option {
			return []guard.Option{guard.WithStore(fileStore(b, b.TempDir())), guard.WithExclusiveStore()}
		}},
		{"file-store-shared", func() []guard.Option { return []guard.Option{guard.WithStore(fileStore(b, b.TempDir()))} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			k := guard.NewKeyed(c.opts()...)
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

// BenchmarkCheckSameTokenVerifier: Check of the token at the mark with and
// without a verifier: the same work, as the verifier is asked only about
// tokens above the mark.
func BenchmarkCheckSameTokenVerifier(b *testing.B) {
	for _, verified := range []bool{false, true} {
		name := "none"
		opts := []guard.Option{guard.WithInitialMark(42)}
		if verified {
			name = "verifier"
			v := newGrants()
			v.grant("", 42)
			opts = append(opts, guard.WithVerifier(v))
		}
		b.Run(name, func(b *testing.B) {
			g := guard.New(opts...)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := g.Check(42); err != nil {
						b.Error(err)
						return
					}
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
