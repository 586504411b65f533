package etcdio

import (
	"context"
	"testing"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/etcdio/etcdtest"
)

// BenchmarkLoopCall measures one request/reply round trip through a live
// session's event loop: the loop's own overhead on every primitive call.
func BenchmarkLoopCall(b *testing.B) {
	cli := etcdtest.NewClient(b)
	s, err := NewSession(cli)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := call(ctx, s, func(r actor.Reply[int]) { r.Answer(1, nil) }); err != nil {
			b.Fatal(err)
		}
	}
}
