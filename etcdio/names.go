package etcdio

// CheckName returns nil if name is one that etcdio's primitives take as
// their prefix (NewLock, NewRWLock, NewElection, NewSemaphore, RetireRWLock,
// NewVerifier given a name) or key (NewBarrier, NewDoubleBarrier), and
// otherwise the error with which they refuse it, wrapping ErrInvalidArgument
// (and so primitives.ErrInvalidArgument), that says which rule name breaks:
// not empty, not "/", at most 1024 bytes. It applies exactly the check those
// constructors apply to a name, and needs no client: it contacts nothing, so
// a caller can check a name before it connects. A name it accepts may still
// be refused by a constructor for other reasons (its options, its client, a
// session that already runs another kind on the name).
func CheckName(name string) error { return checkPrefix(name) }
