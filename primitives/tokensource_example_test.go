package primitives_test

import (
	"context"
	"net/http"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// A client whose every request carries the token and scope of its current
// grant, and that refuses to send once the grant is released or lost.
func ExampleFollowGrants() {
	var l lock.Service // for example etcdio.NewLock(cli, "/locks/orders/42")
	if l == nil {
		return
	}
	ctx := context.Background()
	src := primitives.FollowGrants(ctx, "/locks/orders/42", l) // before Lock
	client := &http.Client{Transport: fencing.NewScopedTransport(nil, src.Scoped)}
	if _, err := l.Lock(ctx); err != nil {
		return
	}
	_, _ = client.Post("http://resource/orders/42", "text/plain", nil)
}
