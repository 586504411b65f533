// Command client tells the zombie story over HTTP: two owners of a disco lock
// write to an HTTP resource whose writes pass through a fencing guard
// (guard.HTTPMiddleware), and the token travels in the Fencing-Token header,
// added by fencing.NewTransport so that no request is ever sent without one.
//
// Owner A locks and writes. A is paused (a long GC pause, say) past its lease,
// so its hold ends; B locks with a higher token and writes. A wakes up, still
// believing it holds the lock, and writes with its old token: the resource
// answers 409 Conflict, and the stored value stays B's.
//
// One command shows the whole story, with the resource started in-process
// on a free loopback port:
//
//	go run ./examples/lock/http/client
//
// or, with the resource in another terminal:
//
//	go run ./examples/lock/http/resource
//	go run ./examples/lock/http/client -resource http://127.0.0.1:8080
//
// etcd is embedded by default; set ETCD_ENDPOINTS to use a real cluster. The
// program exits 0 only if the story ended as promised.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/examples/lock/http/store"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

func main() {
	story.ClientMain("http client example",
		"base URL of a running examples/lock/http/resource, e.g. http://127.0.0.1:8080 (default: start one in-process)", run)
}

// ttl is the lease time to live of both owners.
const ttl = 2 * time.Second

const (
	key        = "report"
	valueA     = "draft by A"
	valueB     = "final version by B"
	valueAlate = "late edit by A"
)

// outcome is what the story observed, for the test to check.
type outcome struct {
	TokenA, TokenB fencing.Token
	// ZombieStatus and ZombieBody are the resource's answer to A's write
	// after it woke up.
	ZombieStatus int
	ZombieBody   string
	// Final is the stored value at the end.
	Final string
}

// run tells the story against the etcd cluster at endpoints and the HTTP
// resource at resourceURL, or at one it starts in-process if resourceURL is
// empty. It returns an error unless the story ended as promised: A's late
// write rejected with 409, the value B's.
func run(ctx context.Context, out io.Writer, endpoints []string, resourceURL string) (outcome, error) {
	var o outcome
	say, step := story.Narrator(out)

	if resourceURL == "" {
		url, stop, err := startResource()
		if err != nil {
			return o, err
		}
		defer stop()
		resourceURL = url
		say("resource: key/value store started in-process at %s", resourceURL)
	} else {
		say("resource: %s", resourceURL)
	}
	url := strings.TrimSuffix(resourceURL, "/") + "/kv/" + key

	// Each owner is its own process in real life, with its own etcd client
	// and its own HTTP client. The third etcd client plays the world around A.
	clients := story.NewClients(endpoints)
	defer clients.Close()
	clis, err := clients.NewN(3)
	if err != nil {
		return o, err
	}
	cliA, cliB, world := clis[0], clis[1], clis[2]
	prefix := story.Prefix("lock/http")

	// Each HTTP client stamps every request with its owner's current token,
	// read from a TokenSource, and refuses to send while it is 0.
	var tokenA, tokenB atomic.Int64
	baseA, baseB := &http.Transport{}, &http.Transport{}
	defer baseA.CloseIdleConnections()
	defer baseB.CloseIdleConnections()
	httpA := &http.Client{Transport: fencing.NewTransport(baseA, func() fencing.Token { return fencing.Token(tokenA.Load()) })}
	httpB := &http.Client{Transport: fencing.NewTransport(baseB, func() fencing.Token { return fencing.Token(tokenB.Load()) })}

	// Step 1: A locks and writes.
	step("1. A takes the lock and writes")
	a, err := etcdio.NewLock(cliA, prefix, etcdio.WithTTL(ttl))
	if err != nil {
		return o, err
	}
	defer a.Close()
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	aEvents := a.Subscribe(subCtx)
	ga, err := a.Lock(ctx)
	if err != nil {
		return o, fmt.Errorf("A: lock: %w", err)
	}
	o.TokenA = ga.Token()
	tokenA.Store(int64(ga.Token()))
	say("   A holds the lock: fencing token %d (lease %x, TTL %v)", ga.Token(), ga.LeaseID, ga.TTL)
	code, body, err := put(ctx, httpA, url, valueA)
	if err != nil {
		return o, fmt.Errorf("A's first write: %w", err)
	}
	if code == http.StatusConflict {
		return o, story.ForeignTokens(body)
	}
	if code != http.StatusNoContent {
		return o, fmt.Errorf("A's first write: %d %s", code, body)
	}
	say("   A: PUT /kv/%s %q with %s: %d; the resource's mark is now %d", key, valueA, header(ga.Token()), code, ga.Token())

	// Step 2: A is paused until its lease is gone.
	step("2. A is paused (say, a long GC pause) and its lease runs out")
	lost, err := story.Pause(ctx, world, "A", ga.LeaseID, aEvents)
	if err != nil {
		return o, err
	}
	say("   (simulated: another client revoked lease %x instead of waiting %v)", ga.LeaseID, ga.TTL)
	say("   A's Subscribe reports Lost for token %d: its hold is over", lost.Token)
	// A live client would now reset its TokenSource to 0 (tokenA.Store(0))
	// and stop writing. A paused process runs no code: when it wakes up its
	// memory still says token ga.Token(), so tokenA is left as it is.
	say("   a paused process sees nothing: when it wakes up its TokenSource still returns %d", tokenA.Load())

	// Step 3: B locks and writes.
	step("3. B takes the lock and writes")
	b, err := etcdio.NewLock(cliB, prefix, etcdio.WithTTL(ttl))
	if err != nil {
		return o, err
	}
	defer b.Close()
	gb, err := b.Lock(ctx)
	if err != nil {
		return o, fmt.Errorf("B: lock: %w", err)
	}
	o.TokenB = gb.Token()
	if gb.Token() <= ga.Token() {
		return o, fmt.Errorf("B's token %d is not above A's %d", gb.Token(), ga.Token())
	}
	tokenB.Store(int64(gb.Token()))
	say("   B holds the lock: fencing token %d (higher than A's %d)", gb.Token(), ga.Token())
	code, body, err = put(ctx, httpB, url, valueB)
	if err != nil {
		return o, fmt.Errorf("B's write: %w", err)
	}
	if code != http.StatusNoContent {
		return o, fmt.Errorf("B's write was not accepted: %d %s", code, body)
	}
	say("   B: PUT /kv/%s %q with %s: %d; the resource's mark is now %d", key, valueB, header(gb.Token()), code, gb.Token())

	// Step 4: A wakes up and writes with the token it remembers.
	step("4. A wakes up and writes with its old token %d", tokenA.Load())
	o.ZombieStatus, o.ZombieBody, err = put(ctx, httpA, url, valueAlate)
	if err != nil {
		return o, fmt.Errorf("A's late write: %w", err)
	}
	switch o.ZombieStatus {
	case http.StatusConflict:
	case http.StatusNoContent:
		return o, fmt.Errorf("A's late write with old token %d was ACCEPTED: the fence failed", ga.Token())
	default:
		return o, fmt.Errorf("A's late write failed for another reason: %d %s", o.ZombieStatus, o.ZombieBody)
	}
	say("   A: PUT /kv/%s %q with %s: %d %s", key, valueAlate, header(ga.Token()), o.ZombieStatus, http.StatusText(o.ZombieStatus))
	say("      %q", o.ZombieBody)

	// Step 5: the stored value is B's.
	step("5. Outcome")
	if o.Final, err = get(ctx, httpB, url); err != nil {
		return o, err
	}
	if o.Final != valueB {
		return o, fmt.Errorf("the resource holds %q, want B's %q", o.Final, valueB)
	}
	say("   GET /kv/%s: %q: B's write survived, A's late write did not", key, o.Final)
	if err := b.Unlock(ctx); err != nil {
		return o, fmt.Errorf("B: unlock: %w", err)
	}
	tokenB.Store(0) // no grant, no requests: B's client now refuses to send
	say("   B unlocks. The story ended as promised.")
	return o, nil
}

func header(t fencing.Token) string { return fencing.HTTPHeader + ": " + t.String() }

// put stores value at url and returns the status and the (trimmed) body.
func put(ctx context.Context, c *http.Client, url, value string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(value))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(body)), err
}

// get reads the value at url. Reads are not fenced; this one carries a token
// only because c's transport stamps every request.
func get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// startResource serves a fresh store behind a fresh guard on a free loopback
// port, as examples/lock/http/resource does, and returns its base URL.
func startResource() (string, func(), error) {
	srv := &http.Server{Handler: store.New().Handler(guard.New(), nil), ReadHeaderTimeout: 10 * time.Second}
	addr, stop, err := story.StartInProcess(srv.Serve, func() { _ = srv.Close() })
	return "http://" + addr, stop, err
}
