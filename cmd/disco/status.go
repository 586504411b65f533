package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func newStatusCmd(g *globals) *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show who holds, waits for or leads NAME",
		Long: `Show the keys under NAME in the order they were created: the holders and
waiters of a lock or rwlock, the leader and candidates of an election, the
value each carries (a lock's --value, a candidate's VALUE), each key's
creation revision (CREATED; a lock's fencing token is issued at acquisition
and not stored in etcd, a leader's token is its CREATED), each lease with its
remaining TTL, and a rwlock's epoch key. On ZooKeeper and Redis the same
from their layouts.

The kind of NAME is told from its key layout: rwlock keys under NAME/read/
and NAME/write/ (and the epoch key NAME.epoch), disco's lock keys named
<lease>-lock-..., other keys holding values an election's candidates, other
empty keys a lock's (etcdctl lock's, concurrency.Mutex's). --kind overrides
it (an election whose candidates have empty values looks like a lock; on
Redis a lock and an election look alike).

NAME must start with "/" and not end with "/", and be a name the service
takes (not over 1024 bytes; on ZooKeeper a path it takes): any other is
refused with status 2, before status connects. Keys of names nested
under NAME (NAME/sub/...) are not NAME's: they are never shown as its
holders; instead a line "nested: NAME/sub (KIND, N keys)" names each such
name (with --json, the list "nested"). A rwlock's reader and writer keys
sit under NAME/read/ and NAME/write/, so those two last segments are
reserved: a lock named NAME/read is taken for readers of a rwlock NAME.`,
		Args: oneName,
		PreRunE: func(cmd *cobra.Command, a []string) error {
			if err := checkKind(kind); err != nil {
				return argsErr(cmd, "%w", err)
			}
			return g.checkName(a[0]) // before connecting
		},
		RunE: runE(func(cmd *cobra.Command, a []string) error {
			// A signal ends status normally, also while it connects.
			ctx, stop := notifyContext(cmd.Context())
			defer stop()
			interrupted := func(err error) error {
				if ctx.Err() != nil && cmd.Context().Err() == nil {
					return nil
				}
				return err
			}
			b, err := g.dial(ctx)
			if err != nil {
				return interrupted(err)
			}
			defer b.close()
			r, err := b.status(ctx, a[0], kind)
			if err != nil {
				return interrupted(err)
			}
			if g.json {
				return json.NewEncoder(g.stdout).Encode(r)
			}
			return r.render(g.stdout)
		}),
	}
	cmd.Flags().StringVar(&kind, "kind", "", "lock, rwlock or election (default: from the key layout)")
	return cmd
}

// readStatus reads the keys of name at one revision, then their leases.
func readStatus(ctx context.Context, g *globals, cli *clientv3.Client, name, kind string) (*report, error) {
	began := time.Now()
	cctx, cancel := g.commandCtx(ctx)
	defer cancel()
	failed := func(err error) error { return g.requestFailed(cctx, "etcd", cli.Endpoints(), began, err) }
	g.logf("status %s: keys under etcd prefix %q, and the key %q", name, keyPrefix(name), epochKey(name))
	resp, err := cli.Txn(cctx).Then(
		clientv3.OpGet(keyPrefix(name), clientv3.WithPrefix()),
		clientv3.OpGet(epochKey(name)),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("status %s: %w", name, failed(err))
	}
	kvs, nested := splitNested(name, resp.Responses[0].GetResponseRange().Kvs)
	var epoch *mvccpb.KeyValue
	if ekv := resp.Responses[1].GetResponseRange().Kvs; len(ekv) > 0 {
		epoch = ekv[0]
	}
	r := &report{Service: "etcd", Name: name, Kind: kind, KindFrom: "flag", Revision: resp.Header.Revision, Epoch: epochOf(epoch), Nested: nested}
	if kind == "" {
		r.Kind, r.KindFrom = detectKind(name, kvs, epoch), "layout"
	}
	r.Queue = classify(name, r.Kind, kvs)
	ttls := map[int64]*clientv3.LeaseTimeToLiveResponse{}
	for i := range r.Queue {
		e := &r.Queue[i]
		if e.leaseID == 0 {
			continue
		}
		t, ok := ttls[e.leaseID]
		if !ok {
			if t, err = cli.TimeToLive(cctx, clientv3.LeaseID(e.leaseID)); err != nil {
				return nil, fmt.Errorf("status %s: lease %s: %w", name, e.Lease, failed(err))
			}
			ttls[e.leaseID] = t
		}
		e.LeaseTTL, e.LeaseGrantedTTL = &t.TTL, t.GrantedTTL
	}
	return r, nil
}

// render writes r as a table a person reads at a glance.
func (r *report) render(w io.Writer) error {
	if err := r.renderOwn(w); err != nil {
		return err
	}
	for _, n := range r.Nested {
		keys := "keys"
		if n.Keys == 1 {
			keys = "key"
		}
		if _, err := fmt.Fprintf(w, "nested: %s (%s, %d %s)\n", n.Name, n.Kind, n.Keys, keys); err != nil {
			return err
		}
	}
	return nil
}

// renderOwn writes the table of r's own keys.
func (r *report) renderOwn(w io.Writer) error {
	at := fmt.Sprintf(" at revision %d", r.Revision)
	if r.Service != "etcd" {
		at = " on " + r.Service
	}
	if len(r.Queue) == 0 && r.Epoch == nil {
		_, err := fmt.Fprintf(w, "%s: no keys of its own under %s/ (nobody holds, waits or leads)%s\n", r.Name, r.Name, at)
		return err
	}
	keys := "keys"
	if len(r.Queue) == 1 {
		keys = "key"
	}
	fmt.Fprintf(w, "%s: %s (kind from %s), %d %s%s\n", r.Name, r.Kind, r.KindFrom, len(r.Queue), keys, at)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	switch r.Kind {
	case kindElection:
		fmt.Fprintln(tw, "POS\tROLE\tVALUE\tTOKEN\tKEY\tLEASE\tTTL")
	case kindRWLock:
		fmt.Fprintln(tw, "POS\tROLE\tMODE\tCREATED\tKEY\tLEASE\tTTL")
	default:
		fmt.Fprintln(tw, "POS\tROLE\tVALUE\tCREATED\tKEY\tLEASE\tTTL")
	}
	for _, e := range r.Queue {
		switch r.Kind {
		case kindElection:
			fmt.Fprintf(tw, "%d\t%s\t%q\t%d\t%s\t%s\t%s\n", e.Position, e.Role, e.Value, e.CreatedRevision, e.Key, orDash(e.Lease), e.ttl())
		case kindRWLock:
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Position, e.Role, e.Mode, e.CreatedRevision, e.Key, orDash(e.Lease), e.ttl())
		default:
			fmt.Fprintf(tw, "%d\t%s\t%q\t%d\t%s\t%s\t%s\n", e.Position, e.Role, e.Value, e.CreatedRevision, e.Key, orDash(e.Lease), e.ttl())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case r.Service == "ZooKeeper":
		fmt.Fprintln(w, "CREATED: the znode's czxid; LEASE: the session that owns it.")
		return nil
	case r.Service == "Redis":
		fmt.Fprintln(w, "CREATED: the hold's number; LEASE: its session's id.")
		return nil
	}
	switch r.Kind {
	case kindElection:
		fmt.Fprintln(w, "TOKEN: the candidate's key's creation revision, the leader's fencing token.")
	case kindRWLock:
		fmt.Fprintln(w, "CREATED: the key's creation revision, not its fencing token (tokens come from the epoch key).")
	default:
		fmt.Fprintln(w, "CREATED: the key's creation revision, not its fencing token (a lock's token is issued at acquisition and not stored in etcd).")
	}
	if r.Epoch != nil {
		fmt.Fprintf(w, "epoch %s: last advanced by a %s, at revision %d (the newest token issued)\n", r.Epoch.Key, r.Epoch.Value, r.Epoch.Revision)
	}
	return nil
}

// ttl formats the lease's remaining TTL.
func (e queueEntry) ttl() string {
	switch {
	case e.LeaseTTL == nil:
		return "-"
	case *e.LeaseTTL < 0:
		return "expired"
	}
	if e.LeaseGrantedTTL == 0 {
		return fmt.Sprintf("%ds", *e.LeaseTTL)
	}
	return fmt.Sprintf("%ds/%ds", *e.LeaseTTL, e.LeaseGrantedTTL)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
