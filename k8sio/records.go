package k8sio

import (
	"context"
	"encoding/json"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ahrtr/disco/primitives/driver"
)

// A waiting candidate's record is a Lease of its own (see the package
// doc). The API server expires nothing, so the record carries a lease of
// the Lease kind: leaseDurationSeconds is its session's TTL, and the
// session's renewal rounds move its renewTime on every other round while
// the candidate waits. The candidate that takes the
// election's Lease (sweep) deletes the election's records not renewed for
// recordStale of their lease durations, by its own clock: those of
// candidates that crashed while waiting. The margin covers clocks that
// disagree by up to two durations; a live candidate whose record is
// deleted all the same learns it from its watch of the record, and its
// Campaign fails with ErrLost, as when anyone deletes it.

// recordStale is how many of its lease durations a record may go without
// a renewal before a sweep deletes it.
const recordStale = 3

// recordRenewal is the least time between two renewals of a waiting
// candidate's record: with a round every third of the TTL, the record is
// renewed every other round, about every two thirds of the TTL (a failed
// renewal is not retried sooner).
func (s *Session) recordRenewal() time.Duration { return s.ttl / 2 }

// newRecord returns this candidate's record, named name, renewed at now.
func (v *service) newRecord(name string, now time.Time) *coordinationv1.Lease {
	dur, at := int32(v.s.ttl/time.Second), metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v.ns,
			Labels:      map[string]string{LabelCandidate: "true"},
			Annotations: map[string]string{AnnotationCandidateOf: v.name}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &v.s.id, LeaseDurationSeconds: &dur, RenewTime: &at},
	}
}

// renewRecord has a helper move the waiting Campaign's record's renewTime
// to sent, if its last renewal was sent recordRenewal ago or more. The
// request runs off the loop and does not count in the session's round: a
// failure is the record's alone (the next renewal comes recordRenewal
// later, well within recordStale durations), and a record deleted
// meanwhile ends the Campaign through its watch. Loop only.
func (v *service) renewRecord(sent time.Time) {
	c := v.camp
	if c == nil || c.record == "" || sent.Sub(c.renewed) < v.s.recordRenewal() {
		return
	}
	c.renewed = sent
	name := c.record
	at, err := json.Marshal(metav1.NewMicroTime(sent))
	if err != nil {
		return
	}
	patch := []byte(`{"spec":{"renewTime":` + string(at) + `}}`)
	v.s.goHelper(func() {
		ctx, cancel := context.WithTimeout(v.s.ctx, opTimeout)
		defer cancel()
		if _, err := v.leases.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			v.s.log.Debug("k8sio: renew candidate record", zap.String("record", name), zap.Error(err))
		}
	})
}

// deleteRecord deletes the candidate record name once creating (if not
// nil) is closed, the create of it under way returned, repeating a failed
// delete until by; a record still left waits for a sweep.
func (v *service) deleteRecord(name string, creating <-chan struct{}, by time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	if creating != nil {
		select {
		case <-creating:
		case <-ctx.Done():
			v.s.log.Debug("k8sio: delete candidate record: its create is still under way", zap.String("record", name))
			return
		}
	}
	pause := driver.NewBackoff(v.retryAfter(), opTimeout/5)
	for {
		err := v.leases.Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		if !pause.Wait(ctx) {
			v.s.log.Debug("k8sio: delete candidate record", zap.String("record", name), zap.Error(err))
			return
		}
	}
}

// sweep deletes, on a helper, the records of the election's candidates
// that are stale (see recordStale) at this moment; each delete is
// conditioned on the record being unchanged since it was read, so that a
// renewal that lands in between keeps it.
func (v *service) sweep() {
	v.s.goHelper(func() {
		ctx, cancel := context.WithTimeout(v.s.ctx, opTimeout)
		defer cancel()
		list, err := v.leases.List(ctx, metav1.ListOptions{LabelSelector: LabelCandidate + "=true"})
		if err != nil {
			v.s.log.Debug("k8sio: list candidate records", zap.String("lease", v.key), zap.Error(err))
			return
		}
		now := time.Now()
		for _, r := range list.Items {
			if r.Annotations[AnnotationCandidateOf] != v.name || !stale(&r, now, v.s.ttl) {
				continue
			}
			pre := metav1.Preconditions{UID: &r.UID, ResourceVersion: &r.ResourceVersion}
			err := v.leases.Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &pre})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				v.s.log.Debug("k8sio: delete stale candidate record", zap.String("record", r.Name), zap.Error(err))
			}
		}
	})
}

// stale reports whether the record r has gone recordStale of its lease
// durations without a renewal at now: since its renewTime or, for a record
// without one, its creation; with no lease duration, ttl stands for it.
func stale(r *coordinationv1.Lease, now time.Time, ttl time.Duration) bool {
	last := r.CreationTimestamp.Time
	if r.Spec.RenewTime != nil {
		last = r.Spec.RenewTime.Time
	}
	d := ttl
	if s := r.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		d = time.Duration(*s) * time.Second
	}
	return now.Sub(last) > recordStale*d
}
