package memio

// CheckName returns nil if name is one that memio's primitives take
// (NewLock, NewRWLock, NewElection, NewSemaphore, NewBarrier,
// NewDoubleBarrier), and otherwise the error with which they refuse it,
// wrapping ErrInvalidArgument (and so primitives.ErrInvalidArgument), that
// says which rule name breaks: not empty, not "/", valid UTF-8, at most 1024
// bytes. It applies exactly the check those constructors apply to a name,
// and needs no Store. A name it accepts may still be refused by a
// constructor for other reasons (its options, its Store).
func CheckName(name string) error { return checkName(name) }
