package etcdio

import (
	"context"

	"github.com/ahrtr/disco/actor"
)

// FullMirrors reports how many full mirrors (watches of a prefix that
// carry its keys' values) s keeps open. Only elections open them, to follow
// who leads while someone listens.
func FullMirrors(s *Session) (int, error) {
	return call(context.Background(), s, func(r actor.Reply[int]) {
		n := 0
		for id := range s.mirrors {
			if id.puts {
				n++
			}
		}
		r.Answer(n, nil)
	})
}
