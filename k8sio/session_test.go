package k8sio_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
)

// versionServer answers /version as an API server of major.minor would,
// and counts every other request.
func versionServer(t *testing.T, major, minor string) (kubernetes.Interface, *atomic.Int64) {
	t.Helper()
	var others atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			others.Add(1)
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"major":%q,"minor":%q,"gitVersion":"v%s.%s.0"}`, major, minor, major, strings.TrimRight(minor, "+"))
	}))
	t.Cleanup(ts.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	return cs, &others
}

// A server older than Kubernetes 1.35 is refused by its version, before
// anything is written.
func TestServerTooOld(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	for _, v := range [][2]string{{"1", "34"}, {"1", "34+"}, {"1", "20"}, {"0", "99"}, {"", ""}} {
		cs, others := versionServer(t, v[0], v[1])
		_, err := k8sio.NewElection(cs, "default", "leader")
		if !errors.Is(err, k8sio.ErrServerTooOld) {
			t.Fatalf("version %v: %v, want ErrServerTooOld", v, err)
		}
		if n := others.Load(); n != 0 {
			t.Fatalf("version %v: %d requests besides /version", v, n)
		}
		if _, err := k8sio.NewSession(cs); !errors.Is(err, k8sio.ErrServerTooOld) {
			t.Fatalf("NewSession, version %v: %v, want ErrServerTooOld", v, err)
		}
	}
	for _, v := range [][2]string{{"1", "35"}, {"1", "37+"}, {"2", "0"}} {
		cs, _ := versionServer(t, v[0], v[1])
		s, err := k8sio.NewSession(cs, k8sio.WithTTL(time.Second))
		if err != nil {
			t.Fatalf("version %v: %v", v, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); !errors.Is(err, primitives.ErrClosed) {
			t.Fatalf("second Close: %v, want ErrClosed", err)
		}
	}
}

// Bad input is refused with ErrInvalidArgument, and nothing reaches the
// server.
func TestBadInput(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	cs, others := versionServer(t, "1", "37")
	for _, tc := range []struct {
		what     string
		cs       kubernetes.Interface
		ns, name string
		opts     []k8sio.Option
	}{
		{"nil client", nil, "default", "x", nil},
		{"typed nil client", (*kubernetes.Clientset)(nil), "default", "x", nil},
		{"client without discovery (client-go's fake)", fake.NewClientset(), "default", "x", nil},
		{"empty name", cs, "default", "", nil},
		{"bad namespace", cs, "Default", "x", nil},
		{"empty namespace", cs, "", "x", nil},
		{"not a Lease name", cs, "default", "a/b", nil},
		{"reserved", cs, "default", "a.disco-candidate-b", nil},
		{"too long", cs, "default", strings.Repeat("a", 230), nil},
		{"TTL below 1 s", cs, "default", "x", []k8sio.Option{k8sio.WithTTL(500 * time.Millisecond)}},
		{"TTL beyond an int32 of seconds", cs, "default", "x", []k8sio.Option{k8sio.WithTTL((1 << 31) * time.Second)}},
		{"TTL not whole seconds", cs, "default", "x", []k8sio.Option{k8sio.WithTTL(1500 * time.Millisecond)}},
		{"nil option", cs, "default", "x", []k8sio.Option{nil}},
		{"nil session", cs, "default", "x", []k8sio.Option{k8sio.WithSession(nil)}},
		{"suspend part", cs, "default", "x", []k8sio.Option{k8sio.WithSuspendAfter(1)}},
		{"identity not UTF-8", cs, "default", "x", []k8sio.Option{k8sio.WithIdentity("pod-\xff")}},
		{"identity too long", cs, "default", "x", []k8sio.Option{k8sio.WithIdentity(strings.Repeat("i", 2000))}},
	} {
		e, err := k8sio.NewElection(tc.cs, tc.ns, tc.name, tc.opts...)
		if e != nil || !errors.Is(err, primitives.ErrInvalidArgument) || !errors.Is(err, k8sio.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalidArgument", tc.what, err)
		}
	}
	if n := others.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
	if _, err := k8sio.NewSession((*kubernetes.Clientset)(nil)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("NewSession of a typed nil client: %v, want an error wrapping ErrInvalidArgument", err)
	}
	var noContext context.Context
	if err := k8sio.CheckServer(noContext, cs); !errors.Is(err, k8sio.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("CheckServer with a nil context: %v, want an error saying nil context, wrapping ErrInvalidArgument", err)
	}
	if n := others.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
}

// A session lost (its server stopped answering) is closed once: its first
// Close returns nil and a second one an error wrapping ErrClosed, as after
// a session that was not lost. Before, every Close of a lost session
// returned nil.
func TestSecondCloseOfLostSession(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	var answered atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" && answered.CompareAndSwap(false, true) {
			fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.0"}`)
			return
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer ts.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	s, err := k8sio.NewSession(cs, k8sio.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session outlived its TTL by 9 s with its server down")
	}
	if err := s.Err(); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Err of a session whose server went down: %v, want ErrLost", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("first Close of a lost session: %v", err)
	}
	if err := s.Close(); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("second Close of a lost session: %v, want an error wrapping ErrClosed", err)
	}
}
