package etcdio

import (
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// GrantScope makes a semaphore service a primitives.GrantScoper, so that
// primitives.FollowGrants stamps each grant with the fencing scope of its
// slot ("<name>#<slot>", semaphore.Grant.Scope) rather than the bare name.
// ok is false unless a is the grant the service holds now.
func (m semService) GrantScope(a primitives.Acquired) (string, bool) {
	h, ok := m.Current()
	if !ok || h.Created != a.Created {
		return "", false
	}
	slot := m.slotOf(a.Created)
	if slot < 0 {
		return "", false
	}
	return semaphore.Scope(m.nameArg, slot), true
}
