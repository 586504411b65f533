package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
)

// nameCommands are the commands that take a NAME, each on name.
func nameCommands(name string) [][]string {
	return [][]string{
		{"status", name},
		{"lock", name, "--", "true"},
		{"elect", name, "v", "--", "true"},
		{"elect", name, "v"},
		{"observe", name},
	}
}

// refusedNames are NAMEs each service refuses, with what the message
// says of each.
func refusedNames() map[string]map[string]string {
	long := "/" + strings.Repeat("x", 1100)
	return map[string]map[string]string{
		"etcd": {long: "prefix of 1101 bytes, more than 1024"},
		"zookeeper": {
			long:           "(1101 bytes): more than 1024",
			"/a//b":        "empty segment",
			"/zookeeper/x": "/zookeeper is ZooKeeper's own",
			"/a/..":        `segment ".."`,
			"/a/b.epoch":   "epoch znode",
		},
		"redis": {long: "(1101 bytes): more than 1024"},
	}
}

// serviceNames are the stores' names in disco's messages.
var serviceNames = map[string]string{"etcd": "etcd", "zookeeper": "ZooKeeper", "redis": "Redis"}

// checkRefused runs each command on a NAME that the service at ep refuses
// and fails t unless it exits 2 with a line that names NAME, the service
// and the rule it breaks (rule), in words of the name's own, not of a
// library call disco made, and then the help to read.
func checkRefused(t *testing.T, ep, service, name, rule string) {
	t.Helper()
	show := name[:min(len(name), 20)]
	for _, args := range nameCommands(name) {
		code, stdout, stderr := runDisco(t, 15*time.Second, append([]string{"--endpoints", ep, "--dial-timeout", "2s"}, args...)...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		help := "Run 'disco " + args[0] + " --help' for usage."
		if code != exitUsage || stdout != "" || len(lines) != 2 || lines[1] != help ||
			!strings.HasPrefix(lines[0], `disco: NAME "`+show) || !strings.Contains(lines[0], " on "+service+": ") ||
			!strings.Contains(lines[0], rule) || !strings.Contains(lines[0], "invalid argument") ||
			strings.Contains(lines[0], "NewVerifier") || strings.Contains(lines[0], ": new ") || len(lines[0]) > 300 {
			t.Errorf("%s %.20q: exit status %d, stdout %q, stderr %.300q; want %d, a line `disco: NAME %q...` naming %s and saying %q, and %q",
				args[0], name, code, stdout, stderr, exitUsage, show, service, rule, help)
		}
	}
}

// A NAME the service refuses (its library's CheckName) is refused before
// disco connects, even to an endpoint that would never answer: no
// connection, status 2 and the message checkRefused wants.
func TestRefusedNameBeforeConnecting(t *testing.T) {
	noLeaks(t)
	for _, st := range []struct{ store, scheme string }{{"etcd", ""}, {"zookeeper", "zk://"}, {"redis", "redis://"}} {
		t.Run(st.store, func(t *testing.T) {
			addr, accepted := testkit.SilentEndpoint(t)
			for name, rule := range refusedNames()[st.store] {
				checkRefused(t, st.scheme+addr, serviceNames[st.store], name, rule)
			}
			if isClosed(accepted) {
				t.Errorf("disco connected to the %s endpoint to refuse a NAME", serviceNames[st.store])
			}
		})
	}
}

// On a store that answers, a refused NAME gets the same message.
func TestRefusedNameMessageOnEveryStore(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ep := st.start(t)
			for name, rule := range refusedNames()[st.name] {
				checkRefused(t, ep, serviceNames[st.name], name, rule)
			}
		})
	}
}
