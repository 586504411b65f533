package etcdio_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/storetest"
)

// dropPrefix removes the keys under prefix when t ends, so tests leave
// nothing in a cluster given by ETCD_ENDPOINTS.
func dropPrefix(t *testing.T, prefix string) {
	cli := newClient(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = cli.Delete(ctx, prefix, clientv3.WithPrefix())
	})
}

func TestMarkStoreLaws(t *testing.T) {
	noLeaks(t)
	prefix := prefixOf(t) + "/"
	dropPrefix(t, prefix)
	s, err := etcdio.NewMarkStore(newClient(t), prefix)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, s, "")
}

// TestMarkStoreCrash: a process raising marks in etcd is killed mid-raise;
// a guard rebuilt on etcd rejects the zombie's token.
func TestMarkStoreCrash(t *testing.T) {
	env := []string{"ETCD_ENDPOINTS=" + strings.Join(etcdtest.Endpoints(), ",")}
	prefix := "/test/" + t.Name() + "/"
	if !storetest.IsChild() {
		dropPrefix(t, prefix)
	}
	storetest.Crash(t, prefix, env, func(prefix string) (guard.MarkStore, func(), error) {
		cli, err := embedded.NewClient(etcdtest.Endpoints())
		if err != nil {
			return nil, nil, err
		}
		s, err := etcdio.NewMarkStore(cli, prefix)
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return s, func() { cli.Close() }, nil
	})
}

func TestMarkStoreBadInput(t *testing.T) {
	if _, err := etcdio.NewMarkStore(nil, "/x/"); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := etcdio.NewMarkStore(newClient(t), ""); err == nil {
		t.Error("empty prefix accepted")
	}
}
