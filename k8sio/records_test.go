package k8sio

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A record is stale once it has gone three of its lease durations without
// a renewal: counted from its renewTime, or from its creation when it has
// none (an earlier disco's record); the sweeper's TTL stands in for a
// missing duration.
func TestStale(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) *metav1.MicroTime { m := metav1.NewMicroTime(now.Add(-d)); return &m }
	secs := func(n int32) *int32 { return &n }
	created := metav1.NewTime(now.Add(-time.Hour))
	for _, c := range []struct {
		name  string
		r     coordinationv1.Lease
		stale bool
	}{
		{"renewed within 3 durations", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: at(29 * time.Second), LeaseDurationSeconds: secs(10)}}, false},
		{"not renewed for 3 durations", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: at(31 * time.Second), LeaseDurationSeconds: secs(10)}}, true},
		{"renewTime counts, not creation", coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created},
			Spec: coordinationv1.LeaseSpec{RenewTime: at(time.Second), LeaseDurationSeconds: secs(10)}}, false},
		{"no renewTime: creation counts", coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}}, true},
		{"no duration: the sweeper's TTL", coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: at(4 * time.Second)}}, true},
	} {
		if got := stale(&c.r, now, time.Second); got != c.stale {
			t.Errorf("%s: stale = %v, want %v", c.name, got, c.stale)
		}
	}
}
