package k8sio

// CheckName returns nil if namespace and name are ones NewElection takes,
// and otherwise the error with which it refuses them, wrapping
// ErrInvalidArgument (and so primitives.ErrInvalidArgument), that says which
// rule they break: the namespace a DNS label, the name a Lease name (a DNS
// subdomain) short enough for its candidates' records (which add
// ".disco-candidate-" and 10 characters) and without ".disco-candidate-".
// A name lives in a namespace on Kubernetes, so CheckName takes both. It
// applies exactly the check NewElection applies to them, and needs no
// clientset: it contacts nothing, so a caller can check a name before it
// connects. Names it accepts may still be refused by NewElection for other
// reasons (its options, its clientset).
func CheckName(namespace, name string) error { return checkNames(namespace, name) }
