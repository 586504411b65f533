// Package actor holds the generic pieces of an event loop: a mailbox, calls
// with a reply, and subscriber fan-out. It knows nothing of any store: every
// backend's session loop is built from these pieces (see package
// primitives/driver).
//
// The rules of a loop built on this package:
//
//   - One goroutine, the loop, owns the state. Nobody else reads or writes it;
//     everything else talks to the loop through its Mailbox.
//   - The loop never blocks. Posting to a Mailbox never blocks (the queue is
//     unbounded), answering a Reply never blocks (it has room for exactly one
//     answer), and publishing to a Fanout never blocks (every subscriber has
//     its own queue). Slow work, such as a network round trip, runs on another
//     goroutine and posts its result back as a message.
//   - A caller may give up. Call returns as soon as the caller's context ends;
//     the loop learns of it through Reply.Answer returning false and undoes
//     whatever it had done for that caller. An answer is either seen by the
//     caller or reported to the loop as refused, never lost in between.
//   - A slow subscriber costs memory, not time. Fanout queues events for each
//     subscriber separately. Events that must not be lost are queued in full;
//     events marked coalescable replace a coalescable predecessor that the
//     subscriber has not read yet, so a slow reader still gets the latest one.
package actor
