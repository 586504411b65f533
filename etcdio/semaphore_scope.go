package etcdio

import (
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// GrantScope makes a semaphore service a primitives.GrantScoper, so that
// primitives.FollowGrants stamps each grant with the fencing scope of its
// slot ("<name>#<slot>", semaphore.Grant.Scope) rather than the bare name.
// ok is false once the service has claimed a slot for a later hold: the
// grant a announced is over.
func (st *semState) GrantScope(a primitives.Acquired) (string, bool) {
	slot := st.slotOf(a.Created)
	if slot < 0 {
		return "", false
	}
	return semaphore.Scope(st.nameArg, slot), true
}
