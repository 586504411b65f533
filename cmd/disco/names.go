package main

import (
	"fmt"
	"strings"
)

// checkName refuses, as bad usage, a NAME the command does not take
// (checkNameForm) or the service of g.endpoints refuses (serviceRefuses).
// It connects to nothing: a bad NAME is told before any connection.
func (g *globals) checkName(name string) error {
	if err := checkNameForm(name); err != nil {
		return err
	}
	return g.serviceRefuses(name)
}

// checkNameForm refuses a NAME the command does not take on any service (a
// usage error): one without a leading "/" (names are paths from the root,
// as on every backend), or with a trailing "/" (its keys would fall inside
// the range of the name without it).
func checkNameForm(name string) error {
	switch {
	case !strings.HasPrefix(name, "/"):
		return usageErr(fmt.Errorf(`NAME %q: must start with "/" (a name is a path from the root, like /jobs/nightly)`, name))
	case strings.HasSuffix(name, "/"):
		return usageErr(fmt.Errorf(`NAME %q: must not end with "/" (its keys would go under %q, inside another name's)`, name, name+"/"))
	}
	return nil
}

// keyPrefix is the etcd prefix under which the primitives on name keep
// their keys.
func keyPrefix(name string) string { return name + "/" }
