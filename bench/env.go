package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/grpclog"

	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/internal/testserver"
)

// env is the etcd every scenario of one run talks to: an embedded member
// (the default) or the cluster named by ETCD_ENDPOINTS.
type env struct {
	endpoints  []string
	external   bool
	fsync      bool
	metricsURL string // Prometheus endpoint; "" when unknown (external without -metrics)
	srv        *embedded.Server
	cluster    *embedded.Cluster // -cluster: members behind delaying proxies
	delay      time.Duration     // -delay: added to every link of the cluster, each way
	root       string            // key prefix unique to this run
	seq        atomic.Int64

	// The ZooKeeper and Redis servers of the zk- and redis- scenarios, and
	// the PostgreSQL of the mark-store scenarios, started by the first that
	// needs them (startZK, startRedis, startPostgres) and stopped by close;
	// "" until then.
	zkAddr, redisAddr, pgURL string
	stops                    []func()
	serversDir               string
}

// quietGRPC silences gRPC's process-wide logger, which otherwise prints
// connection errors to stderr when many clients close at once. It must run
// before any gRPC activity.
func quietGRPC() {
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
}

// envCfg is the etcd a run wants.
type envCfg struct {
	fsync bool
	// metricsURL overrides the Prometheus endpoint (needed to measure load
	// on an external cluster).
	metricsURL string
	// members > 0 starts an embedded cluster of that many members, each
	// behind proxies on its client and peer links that hold every chunk of
	// bytes for delay, as if the members and the clients were on separate
	// hosts. Load is then not measured (no single endpoint sees it all).
	members int
	delay   time.Duration
}

// startEnv connects to ETCD_ENDPOINTS if set, otherwise starts an embedded
// member (or cluster) that logs nothing; fsync=false makes it skip fsync.
func startEnv(cfg envCfg) (*env, error) {
	fsync, metricsURL := cfg.fsync, cfg.metricsURL
	e := &env{fsync: fsync, metricsURL: metricsURL, delay: cfg.delay,
		root: fmt.Sprintf("/disco-bench/%x", time.Now().UnixNano())}
	if eps := embedded.EndpointsFromEnv(); len(eps) > 0 {
		e.endpoints, e.external = eps, true
	} else if cfg.members > 0 {
		opts := []embedded.Option{embedded.WithPeerProxies()}
		if !fsync {
			opts = append(opts, embedded.WithUnsafeNoFsync())
		}
		c, err := embedded.StartCluster(cfg.members, opts...)
		if err != nil {
			return nil, fmt.Errorf("starting embedded etcd cluster: %w", err)
		}
		for _, m := range c.Members() {
			m.Delay(cfg.delay)
		}
		e.cluster, e.endpoints = c, c.Endpoints()
	} else {
		var opts []embedded.Option
		if !fsync {
			opts = append(opts, embedded.WithUnsafeNoFsync())
		}
		srv, err := embedded.Start(opts...)
		if err != nil {
			return nil, fmt.Errorf("starting embedded etcd: %w", err)
		}
		e.srv, e.endpoints = srv, srv.Endpoints()
		if e.metricsURL == "" {
			e.metricsURL = srv.MetricsURL()
		}
	}
	// Fail early and clearly when the cluster is unreachable.
	cli, err := e.newClient()
	if err != nil {
		return nil, errors.Join(err, e.close())
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, e.root); err != nil {
		return nil, errors.Join(fmt.Errorf("etcd at %v: %w", e.endpoints, err), e.close())
	}
	return e, nil
}

// newClient returns a new client with its own connection, as a separate
// process would have.
func (e *env) newClient() (*clientv3.Client, error) { return embedded.NewClient(e.endpoints) }

// prefix returns a fresh key prefix for one measurement, so that no two
// measurements (or runs against a shared cluster) see each other's keys.
func (e *env) prefix(name string) string {
	return fmt.Sprintf("%s/%s-%d", e.root, name, e.seq.Add(1))
}

// backend describes the etcd for reports.
func (e *env) backend() string {
	if e.external {
		return fmt.Sprintf("external %v", e.endpoints)
	}
	if e.cluster != nil {
		return fmt.Sprintf("embedded %d-member cluster, %v added to each link each way (fsync=%v)", len(e.cluster.Members()), e.delay, e.fsync)
	}
	return fmt.Sprintf("embedded (fsync=%v)", e.fsync)
}

// startZK starts the run's ZooKeeper (one server, forceSync=no: it does not
// fsync, unlike etcd and Redis here; on a ServerJVM, as deployed) unless it
// runs.
func (e *env) startZK() error {
	if e.zkAddr != "" {
		return nil
	}
	dir, err := e.dir()
	if err != nil {
		return err
	}
	zks, err := testserver.LaunchZooKeeperOn(dir, 1, testserver.ServerJVM)
	if err != nil {
		return fmt.Errorf("starting ZooKeeper: %w", err)
	}
	e.zkAddr, e.stops = zks[0].Addr, append(e.stops, zks[0].Stop)
	return nil
}

// startRedis starts the run's redis-server (appendfsync always, redisio's
// safety contract) unless it runs.
func (e *env) startRedis() error {
	if e.redisAddr != "" {
		return nil
	}
	dir, err := e.dir()
	if err != nil {
		return err
	}
	srv, err := testserver.LaunchRedis(dir)
	if err != nil {
		return fmt.Errorf("starting Redis: %w", err)
	}
	e.redisAddr, e.stops = srv.Addr, append(e.stops, srv.Stop)
	return nil
}

// startPostgres returns the URL of the run's PostgreSQL: DATABASE_URL if
// set, otherwise a server it starts (fsync off, as the tests run it) unless
// one runs.
func (e *env) startPostgres() (string, error) {
	if e.pgURL != "" {
		return e.pgURL, nil
	}
	if url := os.Getenv("DATABASE_URL"); url != "" {
		e.pgURL = url
		return url, nil
	}
	srv, err := testserver.LaunchPostgres()
	if err != nil {
		return "", fmt.Errorf("starting PostgreSQL: %w", err)
	}
	e.pgURL, e.stops = srv.URL, append(e.stops, srv.Stop)
	return e.pgURL, nil
}

// dir is the servers' directory, removed by close.
func (e *env) dir() (string, error) {
	if e.serversDir == "" {
		d, err := os.MkdirTemp("", "disco-bench-servers")
		if err != nil {
			return "", err
		}
		e.serversDir = d
	}
	return e.serversDir, nil
}

// close removes the run's keys from an external cluster (rwlocks leave
// their epoch keys) and stops an embedded one, and the ZooKeeper, Redis and
// PostgreSQL servers.
func (e *env) close() error {
	for _, stop := range e.stops {
		stop()
	}
	if e.serversDir != "" {
		_ = os.RemoveAll(e.serversDir)
	}
	if e.cluster != nil {
		return e.cluster.Close()
	}
	if e.srv == nil {
		cli, err := e.newClient()
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cli.Delete(ctx, e.root+"/", clientv3.WithPrefix())
		return err
	}
	return e.srv.Close()
}
