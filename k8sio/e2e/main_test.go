package e2e_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ahrtr/disco/k8sio/e2e/apiserver"
	"github.com/ahrtr/disco/k8sio/e2e/faults"
)

// srv is the API server every test of the package shares; each test uses
// its own Lease names.
var srv *apiserver.Server

func TestMain(m *testing.M) {
	apiserver.Quiet()
	s, stop, err := apiserver.StartProcess()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the API server:", err)
		os.Exit(1)
	}
	srv = s
	code := m.Run()
	stop()
	os.Exit(code)
}

const namespace = "default"

// client returns a new clientset on its own connection, with its link.
func client(t *testing.T) (*kubernetes.Clientset, *faults.Link) {
	t.Helper()
	link := faults.New()
	cs, err := srv.Client(link.Wrap)
	if err != nil {
		t.Fatal(err)
	}
	return cs, link
}

var admin = sync.OnceValue(func() *kubernetes.Clientset {
	cs, err := srv.Client(nil)
	if err != nil {
		panic(err)
	}
	return cs
})

var invalid = regexp.MustCompile(`[^a-z0-9]+`)

// leaseName maps a test's name to a Lease name of its own.
func leaseName(name string) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	s := strings.Trim(invalid.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(s) > 60 {
		s = s[len(s)-60:]
	}
	return strings.Trim(s, "-") + fmt.Sprintf("-%x", h.Sum64())
}

// noneLeft fails t unless, within a deadline, no goroutine of k8sio is
// left (the API server's own are not checked: it runs on).
func noneLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := goroutines("github.com/ahrtr/disco/k8sio.")
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d k8sio goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// goroutines returns the stacks of the goroutines whose stack has every
// one of marks.
func goroutines(marks ...string) []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
next:
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, m := range marks {
			if !strings.Contains(g, m) {
				continue next
			}
		}
		found = append(found, g)
	}
	return found
}

func background(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
