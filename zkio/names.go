package zkio

// CheckName returns nil if name is a path that zkio's primitives take
// (NewLock, NewRWLock, NewElection, NewSemaphore, NewBarrier,
// NewDoubleBarrier, RetireRWLock, NewVerifier given a path), and otherwise
// the error with which they refuse it, wrapping ErrInvalidArgument (and so
// primitives.ErrInvalidArgument), that says which rule name breaks: a path
// from the root ("/a/b"; a trailing "/" names the same znode), at most 1024
// bytes of UTF-8, without what ZooKeeper refuses (control characters and
// the other runes it reserves, empty, "." or ".." segments, /zookeeper and
// below) or the segment names of disco's own znodes (one ending in
// EpochSuffix, or named as a lock, election or read/write lock member). It
// applies exactly the check those constructors apply to a path, and needs
// no session: it contacts nothing, so a caller can check a name before it
// connects. A name it accepts may still be refused by a constructor for
// other reasons (its options, its servers or session).
func CheckName(name string) error {
	_, err := cleanPath(name)
	return err
}
