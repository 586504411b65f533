// Package reach words a failure to reach a store so that a person sees
// which endpoint it was and why: a host that does not resolve, or no
// answer within a bound. Every backend's constructors and the disco
// command use it, so that the same failure reads the same everywhere.
package reach

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// lookupTimeout bounds the lookup of the endpoints' hosts made after a
// timeout, to tell an unknown host from a silent one.
const lookupTimeout = time.Second

// Failed words err, a failure to reach service (etcd, ZooKeeper, Redis) at
// endpoints, of an attempt bounded by ctx that began at began (bound, if
// not empty, names what set the bound, as "(--dial-timeout)"):
//
//   - "<service> at <endpoints>: no such host <host>" when a host does not
//     resolve: found in err's chain, or looked up once ctx has ended, since
//     some clients (etcd's) report only the timeout;
//   - "<service> at <endpoints> did not answer within <d> <bound>" when
//     ctx's deadline passed (d: the time from began to that deadline);
//   - "<service> at <endpoints>: <err>" otherwise.
//
// The result wraps err. Endpoints are host:port or URLs
// (http://host:port).
func Failed(ctx context.Context, service string, endpoints []string, began time.Time, bound string, err error) error {
	where := strings.Join(endpoints, ",")
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return fmt.Errorf("%s at %s: no such host %q: %w", service, where, dns.Name, err)
	}
	if ctx.Err() == nil {
		return fmt.Errorf("%s at %s: %w", service, where, err)
	}
	if host := unknownHost(endpoints); host != "" {
		return fmt.Errorf("%s at %s: no such host %q: %w", service, where, host, err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		deadline, _ := ctx.Deadline()
		within := deadline.Sub(began).Round(time.Millisecond).String()
		if bound != "" {
			within += " " + bound
		}
		return fmt.Errorf("%s at %s did not answer within %s: %w", service, where, within, err)
	}
	return fmt.Errorf("%s at %s: %w", service, where, err)
}

// unknownHost returns the first of the endpoints' hosts that the resolver
// says does not exist, or "".
func unknownHost(endpoints []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	for _, ep := range endpoints {
		h := host(ep)
		if h == "" || net.ParseIP(h) != nil {
			continue
		}
		_, err := net.DefaultResolver.LookupHost(ctx, h)
		var dns *net.DNSError
		if errors.As(err, &dns) && dns.IsNotFound {
			return h
		}
	}
	return ""
}

// host returns the host of an endpoint, host:port or a URL, or "".
func host(endpoint string) string {
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			return ""
		}
		return u.Hostname()
	}
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return endpoint
	}
	return host
}
