package embedded

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EnvEndpoints names the environment variable that points examples and
// benchmarks at an external etcd cluster: a comma-separated list of client
// endpoints such as "http://10.0.0.1:2379,http://10.0.0.2:2379".
const EnvEndpoints = "ETCD_ENDPOINTS"

// ClientDialTimeout is the dial timeout of clients made by NewClient.
const ClientDialTimeout = 5 * time.Second

// EndpointsFromEnv returns the endpoints listed in ETCD_ENDPOINTS, with
// surrounding spaces and empty items dropped, or nil when the variable is
// unset or lists nothing.
func EndpointsFromEnv() []string {
	var eps []string
	for _, ep := range strings.Split(os.Getenv(EnvEndpoints), ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return eps
}

// StartOrEnv returns the endpoints of the cluster a program should use.
//
// When ETCD_ENDPOINTS lists endpoints, those are returned as they are,
// nothing is started or contacted, opts are ignored, and stop does nothing.
// Otherwise a single embedded member is started as by Start(opts...), and
// stop closes it. stop is never nil when err is nil, and may be called more
// than once.
func StartOrEnv(opts ...Option) (endpoints []string, stop func() error, err error) {
	if eps := EndpointsFromEnv(); len(eps) > 0 {
		return eps, func() error { return nil }, nil
	}
	s, err := Start(opts...)
	if err != nil {
		return nil, nil, err
	}
	return s.Endpoints(), s.Close, nil
}

// NewClient returns an etcd client for endpoints that logs nothing and
// gives up dialing after ClientDialTimeout. The caller closes it.
func NewClient(endpoints []string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("embedded: NewClient: no endpoints")
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   append([]string(nil), endpoints...),
		DialTimeout: ClientDialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: creating etcd client: %w", err)
	}
	return c, nil
}
