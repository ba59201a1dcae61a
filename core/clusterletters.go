package core

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// In cluster mode the dead letters are the cluster's, not a node's: a letter is appended to one list
// in the log (replica.Node.AppendLetter) before the turn that gives its alarm up commits, so that
// Admin.DeadLetters on any node lists every letter, whichever node gave the alarm up and whether or
// not that node still runs, and a letter's Seq (its sequence in the list) names it on every node.
// Admin.Rearm on any node arms the timer where the object lives: at its owner, through the calls
// between nodes (Replication.Calls), or here if this node may serve it; then it appends the
// letter's removal. The object's own copy of the letter and its mark of each re-arm (SEMANTICS O6)
// make a Rearm whose removal was lost, or a letter listed twice, arm the timer once.

// lettersTimeout bounds a listing of the cluster's dead letters, which Admin.DeadLetters makes
// without a context.
const lettersTimeout = 30 * time.Second

// rearmMethod is the internal method a node sends to an object's owner to re-arm one of its dead
// letters: not a name Define accepts, so no user's method can take it.
const rearmMethod = "_rearm"

// letterRecord is one record of the cluster's list of dead letters: a letter, or the removal of
// the letter at sequence Removed.
type letterRecord struct {
	Letter  *DeadLetter `json:"letter,omitempty"`
	Removed int64       `json:"removed,omitempty"`
}

// rearmArg is what rearmMethod carries: the letter and the time to arm it at.
type rearmArg struct {
	Letter DeadLetter `json:"letter"`
	At     time.Time  `json:"at"`
}

// addClusterLetter appends dl to the cluster's list, in the turn that gives its alarm up, and
// returns its sequence there.
func (rt *Runtime) addClusterLetter(ctx context.Context, dl DeadLetter) (int64, error) {
	b, err := json.Marshal(letterRecord{Letter: &dl})
	if err != nil {
		return 0, err
	}
	seq, err := rt.cluster.AppendLetter(ctx, b)
	if err != nil {
		return 0, fmt.Errorf("core: a dead letter for the cluster's list: %w", err)
	}
	return int64(seq), nil
}

// clusterLetters lists the cluster's dead letters, oldest first: each letter once (a letter
// written again, after a crash between its append and its turn's commit, keeps its first
// sequence), without those removed.
func (rt *Runtime) clusterLetters() ([]DeadLetter, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lettersTimeout)
	defer cancel()
	var out []DeadLetter
	listed := map[string]bool{} // by object and letterKey
	ident := func(dl *DeadLetter) string {
		return dl.Namespace + "\x00" + dl.Name + "\x00" + letterKey(dl.Path, dl.Key, dl.Scheduled.UnixNano())
	}
	err := rt.cluster.Letters(ctx, func(seq uint64, b []byte) error {
		var r letterRecord
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("core: record %d of the cluster's dead letters cannot be read: %w", seq, err)
		}
		switch {
		case r.Letter != nil:
			if id := ident(r.Letter); !listed[id] {
				listed[id] = true
				r.Letter.Seq = int64(seq)
				out = append(out, *r.Letter)
			}
		case r.Removed > 0:
			if i := slices.IndexFunc(out, func(d DeadLetter) bool { return d.Seq == r.Removed }); i >= 0 {
				delete(listed, ident(&out[i]))
				out = slices.Delete(out, i, i+1)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("core: listing the cluster's dead letters: %w", err)
	}
	return out, nil
}

// rearmCluster is Admin.Rearm in cluster mode: the letter is found in the cluster's list, armed
// at its object's owner, then removed from the list.
func (rt *Runtime) rearmCluster(ctx context.Context, seq int64, at time.Time) error {
	dls, err := rt.clusterLetters()
	if err != nil {
		return &Error{Op: "rearm", Err: err}
	}
	dl, err := findLetter(dls, seq)
	if err != nil {
		return err
	}
	fail := func(err error) error { return &Error{Op: "rearm", Namespace: dl.Namespace, Name: dl.Name, Err: err} }
	rt.mu.RLock()
	n := rt.namespaces[dl.Namespace]
	rt.mu.RUnlock()
	if n == nil {
		// A cluster's objects live in its log, not in this node's directory: a node that has not
		// registered the namespace can neither run the object nor name its owner's method.
		return fail(fmt.Errorf("%w: namespace %q is not registered on node %q", ErrNoMethod, dl.Namespace, rt.cluster.Name()))
	}
	if err := rt.enter(); err != nil {
		return fail(err)
	}
	defer rt.leave()
	local := func(ctx context.Context) error {
		arm := armLetter(dl, at)
		return n.with(dl.Name, dl.ObjectID, placement{}, func(o *object) error { return o.run(ctx, arm) })
	}
	if rt.router == nil {
		err = viaCaller(ctx, local)
	} else {
		rc := routedCall{ns: n, name: dl.Name, method: rearmMethod, chain: chainFor(ctx), local: local,
			encode: func() ([]byte, error) { return json.Marshal(rearmArg{Letter: *dl, At: at}) },
			decode: func([]byte) error { return nil },
		}
		err = viaCaller(ctx, func(ctx context.Context) error { return rt.router.call(ctx, &rc) })
	}
	if err != nil {
		return fail(err)
	}
	b, err := json.Marshal(letterRecord{Removed: seq})
	if err != nil {
		return fail(err)
	}
	if _, err := rt.cluster.AppendLetter(ctx, b); err != nil {
		return fail(fmt.Errorf("core: the timer is armed again, but the letter's removal: %w", err))
	}
	return nil
}

// rearmHere runs rearmMethod, sent by another node, on the object name of ns here.
func (rt *Runtime) rearmHere(ctx context.Context, ns *namespace, name string, arg []byte) error {
	var a rearmArg
	if err := json.Unmarshal(arg, &a); err != nil {
		return fmt.Errorf("%w: the argument of a re-arm: %w", ErrInvalidArgument, err)
	}
	if a.Letter.Namespace != ns.name || a.Letter.Name != name {
		return fmt.Errorf("%w: a re-arm of %s/%q sent for %s/%q", ErrInvalidArgument, a.Letter.Namespace, a.Letter.Name, ns.name, name)
	}
	arm := armLetter(&a.Letter, a.At)
	return ns.with(name, objectID(ns.name, name), placement{}, func(o *object) error { return o.run(ctx, arm) })
}
