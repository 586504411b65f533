package etcdio

import (
	"context"

	"github.com/ahrtr/disco/actor"
)

// FollowsLeaders reports how many full mirrors (watches of a prefix that
// follow who leads an election) s keeps open.
func FollowsLeaders(s *Session) (int, error) {
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
