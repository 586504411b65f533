package k8sio

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/ahrtr/disco/primitives/driver"
)

// follow delivers the state of the Lease name, and every change of it,
// until ctx ends: deliver(l, rv) says that at resourceVersion rv the Lease
// was l (nil: absent). It lists the one Lease, then watches from the
// list's resourceVersion, and lists again whenever the watch ends; no
// polling. Deliveries may repeat a state; their resourceVersions never go
// back within one list and watch, and may after a new list.
func follow(ctx context.Context, leases coordinationv1client.LeaseInterface, name string, deliver func(l *coordinationv1.Lease, rv string)) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		list, err := leases.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			if !driver.Sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		if len(list.Items) > 0 {
			deliver(&list.Items[0], list.Items[0].ResourceVersion)
		} else {
			deliver(nil, list.ResourceVersion)
		}
		w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			if !driver.Sleep(ctx, backoff) {
				return
			}
			continue
		}
		backoff = 50 * time.Millisecond
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				deliver(l, l.ResourceVersion)
			case watch.Deleted:
				deliver(nil, l.ResourceVersion)
			}
		}
		w.Stop()
	}
}
