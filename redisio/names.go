package redisio

// CheckName returns nil if name is one that redisio's primitives take
// (NewLock, NewRWLock, NewElection, NewSemaphore, NewBarrier,
// NewDoubleBarrier, NewVerifier given a name), and otherwise the error with
// which they refuse it, wrapping primitives.ErrInvalidArgument, that says
// which rule name breaks: not empty, not "/", at most 1024 bytes, not
// disco's own session keys (disco/session, disco/sessions, or a name under
// either). It applies exactly the check those constructors apply to a name,
// and needs no client: it contacts nothing, so a caller can check a name
// before it connects. A name it accepts may still be refused by a
// constructor for other reasons (its options, its client).
func CheckName(name string) error { return checkName(name) }
