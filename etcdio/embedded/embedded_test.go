package embedded

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// opTimeout bounds a single request in the tests.
const opTimeout = 5 * time.Second

func put(t *testing.T, c *clientv3.Client, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := c.Put(ctx, k, v); err != nil {
		t.Fatalf("Put(%q): %v", k, err)
	}
}

func get(t *testing.T, c *clientv3.Client, k string, opts ...clientv3.OpOption) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	resp, err := c.Get(ctx, k, opts...)
	if err != nil {
		t.Fatalf("Get(%q): %v", k, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("Get(%q): %d kvs", k, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value)
}

func closeClient(t *testing.T, c *clientv3.Client) {
	t.Helper()
	if err := c.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("client Close: %v", err)
	}
}

func TestServer(t *testing.T) {
	start := time.Now()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("single member ready in %v", time.Since(start))
	dir := s.DataDir()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("data dir: %v", err)
	}

	c, err := s.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, "k", "v")
	if got := get(t, c, "k"); got != "v" {
		t.Fatalf("Get = %q, want v", got)
	}
	closeClient(t, c)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir still there after Close: %v", err)
	}
}

func TestWithLogger(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	s, err := Start(WithLogger(zap.New(core)), WithUnsafeNoFsync(), WithStartTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if logs.Len() == 0 {
		t.Fatal("no etcd logs reached the logger given to WithLogger")
	}
}
