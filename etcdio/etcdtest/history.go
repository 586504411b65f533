package etcdtest

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Writes counts the puts and deletes of keys under prefix+"/" from revision
// from on, until now: it writes a key of its own beside them (prefix +
// "-mark", deleted after) and reads the history through cli up to that
// write. It fails t if the history cannot be read within 10 s.
func Writes(t testing.TB, cli *clientv3.Client, prefix string, from int64) (puts, deletes int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mark := prefix + "-mark"
	resp, err := cli.Put(ctx, mark, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Delete(ctx, mark)
	for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			switch {
			case ev.Kv.ModRevision >= resp.Header.Revision:
				return puts, deletes
			case !strings.HasPrefix(string(ev.Kv.Key), prefix+"/"):
			case ev.Type == clientv3.EventTypePut:
				puts++
			default:
				deletes++
			}
		}
	}
	t.Fatalf("the history of %s ended before revision %d: %v", prefix, resp.Header.Revision, ctx.Err())
	return 0, 0
}
