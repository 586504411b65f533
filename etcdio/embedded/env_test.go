package embedded

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStartOrEnvUsesEnv(t *testing.T) {
	t.Setenv(EnvEndpoints, " http://127.0.0.1:1 ,, http://127.0.0.1:2,")
	eps, stop, err := StartOrEnv(WithUnsafeNoFsync())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}
	if !slices.Equal(eps, want) {
		t.Fatalf("endpoints = %q, want %q", eps, want)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

func TestStartOrEnvStartsEmbedded(t *testing.T) {
	for _, v := range []string{"", " , "} {
		t.Setenv(EnvEndpoints, v)
		if got := EndpointsFromEnv(); got != nil {
			t.Fatalf("EndpointsFromEnv with %q = %q, want nil", v, got)
		}
	}
	eps, stop, err := StartOrEnv(WithUnsafeNoFsync())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") {
		t.Fatalf("endpoints = %q", eps)
	}
	c, err := NewClient(eps)
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, "k", "v")
	if got := get(t, c, "k"); got != "v" {
		t.Fatalf("Get = %q", got)
	}
	closeClient(t, c)
}

func TestMetricsURL(t *testing.T) {
	s, err := Start(WithUnsafeNoFsync())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, "k", "v")
	closeClient(t, c)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := hc.Get(s.MetricsURL())
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "etcd_server_") {
		t.Fatalf("GET %s: %s, %d bytes", s.MetricsURL(), resp.Status, len(body))
	}
}

func TestBadInput(t *testing.T) {
	for _, n := range []int{-1, MaxClusterSize + 1} {
		if c, err := StartCluster(n); err == nil {
			c.Close()
			t.Fatalf("StartCluster(%d) succeeded", n)
		}
	}
	if _, err := NewClient(nil); err == nil {
		t.Fatal("NewClient(nil) succeeded")
	}

	// A nil member, as returned for an out-of-range index, is inert.
	var m *Member
	if err := m.Stop(); err != ErrNoMember {
		t.Fatalf("nil Stop = %v", err)
	}
	if err := m.Restart(context.Background()); err != ErrNoMember {
		t.Fatalf("nil Restart = %v", err)
	}
	if _, err := m.NewClient(); err != ErrNoMember {
		t.Fatalf("nil NewClient = %v", err)
	}
	m.Blackhole()
	m.Unblackhole()
	m.Delay(time.Second)
	m.Undelay()
	if m.Running() || m.Proxy() != nil || m.Etcd() != nil || m.Endpoint() != "" || m.Index() != -1 {
		t.Fatal("nil member is not inert")
	}
	var s *Server
	var c *Cluster
	if s.Close() != nil || c.Close() != nil {
		t.Fatal("Close on nil returned an error")
	}
}
