package k8sio_test

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
)

// CheckName, which needs no clientset, accepts Lease names in a namespace
// and refuses, in NewElection's words and wrapping ErrInvalidArgument, the
// namespaces and names NewElection refuses (before it contacts anything).
func TestCheckName(t *testing.T) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		namespace, name, why string // why: "" if accepted
	}{
		{"default", "jobs-nightly", ""},
		{"kube-system", "a.b.c", ""},
		{"default", strings.Repeat("x", 253-27), ""},
		{"Default", "jobs", "namespace"},
		{"", "jobs", "namespace"},
		{"default", "", "empty name"},
		{"default", "/jobs", "is not a Lease name"},
		{"default", "Jobs", "is not a Lease name"},
		{"default", strings.Repeat("x", 253-26), "more than 226"},
		{"default", "jobs.disco-candidate-x", "reserved for candidates' records"},
	} {
		err := k8sio.CheckName(c.namespace, c.name)
		show := c.name[:min(len(c.name), 20)]
		if c.why == "" {
			if err != nil {
				t.Errorf("CheckName(%q, %q): %v, want nil", c.namespace, show, err)
			}
			continue
		}
		if !errors.Is(err, k8sio.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("CheckName(%q, %q): %v, want an error saying %q wrapping ErrInvalidArgument", c.namespace, show, err, c.why)
			continue
		}
		if _, cerr := k8sio.NewElection(cs, c.namespace, c.name); cerr == nil || !strings.Contains(cerr.Error(), err.Error()) {
			t.Errorf("NewElection(%q, %q): %v; want CheckName's %q", c.namespace, show, cerr, err)
		}
	}
}
