package actor

// Hooks for the package's external tests.

// Abandoned reports whether r's caller gave up waiting.
func Abandoned[T any](r Reply[T]) bool { return r.abandoned() }

// WaitFanout blocks until every subscriber goroutine of f has exited.
func WaitFanout[E any](f *Fanout[E]) { f.wait() }
