// Package k8sio is disco's Kubernetes backend: leader election on a
// coordination.k8s.io/v1 Lease, with a fencing token the API server itself
// orders, on Kubernetes 1.35 or later. It is its own module
// (github.com/ahrtr/disco/k8sio) and needs only client-go and apimachinery.
//
//	cs := kubernetes.NewForConfigOrDie(cfg)
//	e, _ := k8sio.NewElection(cs, "default", "scheduler", k8sio.WithIdentity(podName))
//	defer e.Close()
//	err := election.Lead(ctx, e, podName, func(ctx context.Context, l election.Leadership) error {
//		return runScheduler(ctx, l.Token()) // stops when leadership is lost
//	})
//
// k8sio offers elections only, no lock: see "Why no lock" below.
//
// # The Lease
//
// An election is one Lease, name in namespace, kept the way client-go's
// leaderelection (resourcelock.LeaseLock) keeps it: holderIdentity is the
// leader's identity (WithIdentity; one session is one identity),
// leaseDurationSeconds the session's TTL, acquireTime and renewTime the
// times of the take and of the last renewal, leaseTransitions counts the
// takes, and a leader that resigns leaves holderIdentity empty with a lease
// duration of 1 s. A disco leader adds two annotations: AnnotationTerm (its
// token, holderIdentity and leaseTransitions) and AnnotationValue (its
// value). Leadership.Key is "namespace/name" and is the same from term to
// term; Created, which names a term, is its token; LeaseID is 0 (Kubernetes
// has no lease id).
//
// # The token
//
// A leader's token is the Lease's resourceVersion at the write that made
// it the holder: the resourceVersion that write was conditioned on (the
// update carries it as metadata.resourceVersion, so the API server applies
// it only if the Lease is still at that version). It is known before the
// write, so the same write stores it in AnnotationTerm, where every
// observer reads it, and renewals, which change the Lease's
// resourceVersion, leave it alone.
//
// Tokens strictly increase from term to term. From Kubernetes 1.35 on a
// resourceVersion is an integer, and of two writes of one resource the
// later one has the greater resourceVersion (KEP-5504; apimachinery's
// resourceversion.CompareResourceVersion), across deletes and recreation.
// Let term 1 be made by a write W1 conditioned on version r1, and term 2,
// later, by a write W2 conditioned on r2. W1 itself gave the Lease a
// version v1 > r1. W2 was applied to the Lease as it stood at r2, after
// W1: either the same Lease, modified by W1 or after it, so r2 >= v1; or a
// Lease created again after a delete that came after W1, so r2 is that
// creation's version, above the delete's, above v1. Either way r2 >= v1 >
// r1. A Lease that does not exist is first created with no holder, and then
// taken by a conditioned update like any other, so a recreated Lease never
// repeats a token. (Every update carries the uid of the Lease it was made
// from: the API server would otherwise apply a PUT of a Lease deleted
// meanwhile as its creation, whatever resourceVersion it names.) NewSession (and NewElection) refuse an API server older
// than 1.35, by its version, with ErrServerTooOld.
//
// # Leading and losing
//
// A session renews each Lease it holds every third of its TTL (with a
// WithSuspendAfter part below 1/2, every two thirds of that part), each
// renewal a request of its own. The driver engine's clock rules apply to
// each Lease alone: its deadline counts from the send of its last
// acknowledged renewal (or of its take); its holder is Suspended after
// WithSuspendAfter's part of the TTL without one and Lost at the deadline,
// and the election stays usable. A renewal of one Lease that the API server
// does not answer delays no other Lease's. The session lives while the API
// server answers it: an acknowledged renewal or take of any of its Leases
// confirms it, and a session that none confirmed for a third of the TTL
// asks for the server's version (as one that holds no Lease does); one
// confirmed by nothing for its TTL is lost, everything it holds with it,
// and its elections are done. A candidate waits at
// least the holder's leaseDurationSeconds from the moment it saw the
// holder's record last change before it takes the Lease, so a disco
// successor never takes over before its predecessor's deadline (clocks that
// run at the same rate assumed, as with every lease). A Lease deleted
// behind its holder's back, or taken by someone else, ends the term with
// Lost; the candidate stays usable.
//
// # Waiting, and its fairness
//
// A Lease has one holder and no queue. A waiting candidate watches the
// Lease (a watch, no polling loop) and takes it as soon as it is free
// (holderIdentity empty, after a Resign or a client-go release, or the
// Lease is gone) or its holder's lease duration has passed since the
// candidate last saw the holder's record change. Whoever's conditioned
// update reaches the API server first wins: waiting is not FIFO, and a
// candidate that waited longest has no precedence over one that just
// arrived. After a holder that crashed, every candidate waits out the
// holder's lease duration from its own last sight of a renewal.
//
// While it waits, a candidate keeps a record, a Lease of its own named
// <name>.disco-candidate-<random> with LabelCandidate and
// AnnotationCandidateOf, holding its identity: it shows who waits
// (kubectl get leases -l disco.ahrtr.github.io/candidate), and deleting it
// withdraws that candidate (its Campaign fails with an error wrapping
// primitives.ErrLost). A Campaign keeps one record, under one name,
// however many times its create is tried; the record is deleted when the
// Campaign ends (a failed delete is tried again for up to 5 s, and a
// record still left is swept as a crashed candidate's is; see "Requests,
// giving up and Close" below). A take of a
// Campaign that ended without it, which the API server applies late (its
// client had given up), leaves a term nobody holds: the candidate resigns
// it as soon as it sees it, and tries a resign that fails again until it
// goes through or the Lease shows another term, with growing waits from a
// twentieth of the TTL to a third of it. The
// API server expires nothing, so a record carries a lease of its own: its
// leaseDurationSeconds is the candidate's TTL, and the candidate moves its
// renewTime on every other renewal round (about every two thirds of the
// TTL) while it waits. The candidate that
// next takes the election's Lease deletes the election's records not
// renewed for three of their lease durations by its own clock: those of
// processes that crashed while waiting (clocks that disagree by more than
// two durations could take a live candidate's record for a crashed one's;
// that Campaign then fails with ErrLost). Nothing reads records to decide
// who leads.
//
// # Requests, giving up and Close
//
// A session's loop owns its elections' state and makes no request
// itself: each request runs on a helper goroutine, bounded by 5 s (and by
// the deadline of the clock that covers it), and its answer goes back to
// the loop. The requests of one election run one after the other, in the
// order they were asked for: renewals, a waiting candidate's reads, takes
// and the create of its record, Resign, Proclaim, the resigns of terms
// nobody holds, and Close's resigns. Those of different elections run side
// by side, so an API server that does not answer one election's request
// (a stalled connection, a slow Lease) holds up that election alone: the
// session's other elections go on campaigning, renewing, resigning,
// proclaiming and delivering their events. A call waits for the requests
// of its election asked for before it; one whose ctx ends meanwhile
// returns its ctx's error and changes nothing. Leader, Term, Subscribe and
// Observe's first read make their requests themselves; a record's
// renewals and deletes, and sweeps, run on helpers of their own.
//
// A Campaign whose ctx ends returns its ctx's error once its withdrawal
// (its record deleted, and the term of a take whose answer was lost
// resigned) is done, or 500 ms after its ctx ended, whichever comes first.
// The withdrawal goes on without it, for up to 5 s, and the election's
// Close waits for it: if the API server answers again within those 5 s,
// nothing of the Campaign is left once Close has returned (else its
// record is swept, as a crashed candidate's).
//
// Close resigns the term it holds, ends a waiting Campaign (deleting its
// record) and resigns a term nobody holds. These requests, tried again
// while they fail, and the withdrawals still under way are bounded by 5 s
// together, counted from Close's call (a Session's Close: for all its
// elections together); a request of the election already under way, itself
// bounded by 5 s from its send, ends within that bound, and Close's
// requests follow it. A term Close could not resign stays on the Lease
// until its lease duration has passed; a record left is swept.
//
// # With client-go's leaderelection
//
// disco candidates and client-go candidates on the same Lease agree on who
// leads: each side waits while the other's holder renews, and takes the
// Lease when it is released or its lease duration has passed. A client-go
// leader writes no token: disco's Leader and Observe report it with its
// holderIdentity as the Value and a zero token and Created. 0 is no token,
// not a lower one: Observe's tokens go back only to 0, for such a leader.
// (A client-go leader keeps the annotations it finds, so AnnotationTerm
// speaks only while its holderIdentity and leaseTransitions match the
// Lease's.) A request without a token is refused by a guard
// (fencing/guard: HTTP 428, gRPC InvalidArgument), so a resource fenced by
// disco serves disco leaders only. The next disco leader's token is above
// every earlier disco leader's, whatever client-go leaders came between.
//
// # Why no lock
//
// The conformance suite's lock laws ask for a FIFO queue whose order every
// owner agrees on and whose dead entries go away by themselves. On the API
// server an entry would be a Lease of its own: nothing expires it (a
// crashed waiter's entry would block the queue until other clients judge it
// dead by their own clocks and delete it), and an object has no creation
// sequence to order entries by (resourceVersion changes with every
// renewal), so ordering them would take a second write per waiter. k8sio
// offers elections until that is built and shown to pass the lock section
// as it stands.
//
// # Options
//
// The options every disco backend shares, with the same meaning and
// defaults: WithTTL (10 s, whole seconds: leaseDurationSeconds),
// WithSuspendAfter (1/2), WithCancelOnSuspend, WithMetrics, WithLogger,
// WithContext (bounds the version check), WithSession; and WithIdentity.
// Values are at most MaxValueSize (64 KiB), and valid UTF-8.
package k8sio
