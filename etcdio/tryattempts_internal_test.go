package etcdio

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/primitives/lock"
)

// A TryLock that finds a key under the lock's prefix reads what it found
// in attempts: a member that does not answer the read is given up after an
// attempt's bound and the read asked again, so the TryLock settles (taken,
// or held past a nested name's key) while its caller's context lives on.
// Before, both reads waited on the caller's context alone: a silent member
// held the TryLock until its deadline.
func TestTryReadsInAttempts(t *testing.T) {
	for _, tc := range []struct {
		name string
		// block puts what the TryLock finds under prefix; want is its
		// answer.
		block func(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string)
		want  error
	}{
		{"taken", func(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) {
			l, err := NewLock(cli, prefix)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			if _, err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
		}, lock.ErrLockTaken},
		{"past a nested name", func(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) {
			g, err := cli.Grant(ctx, 30)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Revoke(context.Background(), g.ID) })
			if _, err := cli.Put(ctx, prefix+"/nested/k", "", clientv3.WithLease(g.ID)); err != nil {
				t.Fatal(err)
			}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := etcdtest.NewClient(t)
			prefix := "/test/try-attempts/" + strings.ReplaceAll(tc.name, " ", "-")
			defer cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			tc.block(t, ctx, cli, prefix)
			// The first read of the prefix, and the first look past what
			// it found (a transaction of a single read), go unanswered.
			var gets, looks atomic.Int32
			cli.KV = &hookedKV{KV: cli.KV,
				silentGet: func(key string) bool { return strings.HasPrefix(key, prefix) && gets.Add(1) == 1 },
				silentTxn: func(then []clientv3.Op) bool {
					return len(then) == 1 && then[0].IsGet() && looks.Add(1) == 1
				},
			}
			l, err := NewLock(cli, prefix)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, err = l.TryLock(ctx)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("TryLock with a read gone unanswered: %v, want %v", err, tc.want)
			}
			if gets.Load() < 2 {
				t.Fatalf("%d reads of the prefix, want the silent one and another", gets.Load())
			}
			if tc.want == nil && looks.Load() < 2 {
				t.Fatalf("%d looks past the nested key, want the silent one and another", looks.Load())
			}
		})
	}
}
