package zkio_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-zookeeper/zk"
)

// BenchmarkChildrenListing: what one listing of an election's children
// costs on the test server, client decoding included, with 8 and with
// 1,000 children named as Curator's LeaderLatch names them; beside it, a
// request of the same round trip that carries no list (Exists).
func BenchmarkChildrenListing(b *testing.B) {
	conn := adminConn(b, startZooKeeper(b))
	for _, n := range []int{8, 1000} {
		// Ephemeral children: they go with the connection.
		dir := fmt.Sprintf("/bench-listing-%d", n)
		if _, err := conn.Create(dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			b.Fatal(err)
		}
		for i := range n {
			if _, err := conn.Create(fmt.Sprintf("%s/_c_%036d-latch-", dir, i), nil, zk.FlagSequence|zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("children-%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := conn.Children(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("exists-%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := conn.Exists(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
