package k8sio

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
)

// ErrInvalidArgument is k8sio's sentinel for bad input; it wraps
// primitives.ErrInvalidArgument.
var ErrInvalidArgument = fmt.Errorf("k8sio: invalid argument: %w", primitives.ErrInvalidArgument)

// ErrServerTooOld is returned by NewSession and NewElection for an API
// server older than Kubernetes 1.35, whose resourceVersions are not
// promised to be comparable, so that they could not be fencing tokens.
var ErrServerTooOld = errors.New("k8sio: the API server is older than Kubernetes 1.35")

// The annotations disco writes on a Lease it holds, and the label of a
// waiting candidate's record.
const (
	// AnnotationTerm names the term of the holder that wrote it: its token,
	// holderIdentity and leaseTransitions, as JSON. It speaks for the Lease
	// only while holderIdentity and leaseTransitions still match (a
	// client-go leader keeps the annotations it finds).
	AnnotationTerm = "disco.ahrtr.github.io/term"
	// AnnotationValue is the disco leader's value (Campaign, Proclaim).
	AnnotationValue = "disco.ahrtr.github.io/value"
	// AnnotationCandidateOf names the election a waiting candidate's
	// record is for.
	AnnotationCandidateOf = "disco.ahrtr.github.io/candidate-of"
	// LabelCandidate marks a waiting candidate's record, a Lease of its
	// own named <election>.disco-candidate-<random>.
	LabelCandidate = "disco.ahrtr.github.io/candidate"
)

// candidateMark is in the name of every candidate's record; an election
// name must not contain it.
const candidateMark = ".disco-candidate-"

// candidateSuffix is the length of candidateMark and the random part.
const candidateSuffix = len(candidateMark) + 10

// maxIdentity bounds a holderIdentity.
const maxIdentity = 1024

// minVersion is the first Kubernetes release whose resourceVersions are
// comparable (KEP-5504).
var minVersion = [2]int{1, 35}

// checkNames accepts a namespace (a DNS label) and an election name: a
// Lease name (a DNS subdomain) short enough for its candidates' records,
// without candidateMark.
func checkNames(namespace, name string) error {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %s: %s: %w", driver.QuoteName(namespace), strings.Join(errs, "; "), ErrInvalidArgument)
	}
	switch {
	case name == "":
		return fmt.Errorf("empty name: %w", ErrInvalidArgument)
	case len(name) > validation.DNS1123SubdomainMaxLength-candidateSuffix:
		return fmt.Errorf("name of %d bytes, more than %d: %w", len(name), validation.DNS1123SubdomainMaxLength-candidateSuffix, ErrInvalidArgument)
	case strings.Contains(name, candidateMark):
		return fmt.Errorf("name %s: %q is reserved for candidates' records: %w", driver.QuoteName(name), candidateMark, ErrInvalidArgument)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("name %s is not a Lease name: %s: %w", driver.QuoteName(name), strings.Join(errs, "; "), ErrInvalidArgument)
	}
	return nil
}

// term is what AnnotationTerm holds.
type term struct {
	Token       string `json:"token"`
	Holder      string `json:"holder"`
	Transitions int32  `json:"transitions"`
}

// parseRV reads a resourceVersion as a token: a positive integer, as every
// resourceVersion is from Kubernetes 1.35 on.
func parseRV(rv string) (fencing.Token, error) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("k8sio: resourceVersion %q is not a positive integer", rv)
	}
	return fencing.Token(n), nil
}

// holderOf returns the Lease's holderIdentity, "" if none.
func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func transitionsOf(l *coordinationv1.Lease) int32 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// termOf returns the disco term the Lease records for its current holder,
// if it has one: the annotation is present and names the holder and the
// transition it was written at.
func termOf(l *coordinationv1.Lease) (fencing.Token, bool) {
	h := holderOf(l)
	raw, ok := l.GetAnnotations()[AnnotationTerm]
	if h == "" || !ok {
		return 0, false
	}
	var t term
	if json.Unmarshal([]byte(raw), &t) != nil || t.Holder != h || t.Transitions != transitionsOf(l) {
		return 0, false
	}
	tok, err := parseRV(t.Token)
	if err != nil {
		return 0, false
	}
	return tok, true
}

// leaderOf says who leads by the Lease l (nil: it does not exist) of the
// election key: a disco leader with its value and token; a leader that
// wrote no disco term (client-go's leaderelection) with its
// holderIdentity as the value and no token (0) and no Created; nobody
// (a zero Leadership) when holderIdentity is empty.
func leaderOf(key string, l *coordinationv1.Lease) election.Leadership {
	h := holderOf(l)
	if h == "" {
		return election.Leadership{}
	}
	if tok, ok := termOf(l); ok {
		return election.Leadership{Key: key, Value: l.GetAnnotations()[AnnotationValue], FencingToken: tok, Created: int64(tok)}
	}
	return election.Leadership{Key: key, Value: h}
}

// record is the part of a Lease a candidate watches for signs of life, as
// client-go compares its LeaderElectionRecord: any change restarts the
// holder's lease duration.
type record struct {
	holder           string
	duration         int32
	acquire, renew   time.Time
	transitions      int32
	preferred, strat string
}

func recordOf(l *coordinationv1.Lease) record {
	if l == nil {
		return record{}
	}
	r := record{holder: holderOf(l), transitions: transitionsOf(l)}
	if d := l.Spec.LeaseDurationSeconds; d != nil {
		r.duration = *d
	}
	if t := l.Spec.AcquireTime; t != nil {
		r.acquire = t.Time
	}
	if t := l.Spec.RenewTime; t != nil {
		r.renew = t.Time
	}
	if p := l.Spec.PreferredHolder; p != nil {
		r.preferred = *p
	}
	if s := l.Spec.Strategy; s != nil {
		r.strat = string(*s)
	}
	return r
}

// withTerm returns a copy of l taken by holder at token (l's
// resourceVersion) with value: the fields client-go's LeaseLock writes when
// it takes a Lease, and disco's annotations.
//
// Every update of the election's Lease (withTerm, renewed, released,
// proclaimed) is a copy of the Lease as read, and must keep its uid: the
// API server creates a Lease that does not exist on a PUT, whatever
// resourceVersion the PUT carries (the Lease's AllowCreateOnUpdate), and
// the uid is the precondition that refuses it (Conflict) instead. Without
// it a take that reached the server after the Lease was deleted would
// recreate it in a term whose token an earlier leader may hold too
// (TestCampaignRaceHeldTakeAfterDelete in k8sio/e2e).
func withTerm(l *coordinationv1.Lease, holder, value string, token fencing.Token, ttl time.Duration, now time.Time) *coordinationv1.Lease {
	c := l.DeepCopy()
	tr := transitionsOf(l) + 1
	dur := int32(ttl / time.Second)
	mt := metav1.NewMicroTime(now)
	c.Spec.HolderIdentity, c.Spec.LeaseDurationSeconds, c.Spec.LeaseTransitions = &holder, &dur, &tr
	c.Spec.AcquireTime, c.Spec.RenewTime = &mt, &mt
	c.Spec.PreferredHolder, c.Spec.Strategy = nil, nil
	raw, _ := json.Marshal(term{Token: strconv.FormatInt(int64(token), 10), Holder: holder, Transitions: tr})
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[AnnotationTerm] = string(raw)
	c.Annotations[AnnotationValue] = value
	return c
}

// renewed returns a copy of l renewed at now for ttl.
func renewed(l *coordinationv1.Lease, ttl time.Duration, now time.Time) *coordinationv1.Lease {
	c := l.DeepCopy()
	dur := int32(ttl / time.Second)
	mt := metav1.NewMicroTime(now)
	c.Spec.LeaseDurationSeconds, c.Spec.RenewTime = &dur, &mt
	return c
}

// released returns a copy of l let go as client-go lets go of a Lease: no
// holder, a lease duration of 1 s, the transitions kept; disco's
// annotations go.
func released(l *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	c := l.DeepCopy()
	empty, one := "", int32(1)
	mt := metav1.NewMicroTime(now)
	c.Spec.HolderIdentity, c.Spec.LeaseDurationSeconds = &empty, &one
	c.Spec.AcquireTime, c.Spec.RenewTime = &mt, &mt
	delete(c.Annotations, AnnotationTerm)
	delete(c.Annotations, AnnotationValue)
	return c
}

// proclaimed returns a copy of l with value.
func proclaimed(l *coordinationv1.Lease, value string) *coordinationv1.Lease {
	c := l.DeepCopy()
	c.Annotations[AnnotationValue] = value
	return c
}
