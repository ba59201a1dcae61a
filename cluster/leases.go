package cluster

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/durable-go/durable/replog"
)

// A shard's lease is one subject of the shard's own stream, "<prefix>.log.<n>.lease", so it shares
// the raft group of the objects it rules: a stream leader's loss stalls that shard alone. Each
// write expects the subject's last sequence (compare-and-set) and rolls the subject up, so that one
// message per lease stays; a revision is the write's stream sequence, never reused. A delete is a
// marker message (leaseOp: "del"), so that a later creation expects the marker's sequence and
// revisions go on growing. Each write carries an id of its own (leaseID), by which a write that
// was refused by a server that no longer led, while the new leader stored it, is known for what
// it is.
const (
	leaseOp  = "Durable-Lease-Op"
	leaseDel = "del"
	leaseID  = "Durable-Lease-Id"
)

// leaseWhere returns the stream, subject and barrier of shard's lease.
func (e *Engine) leaseWhere(shard int) (stream, subject, barrier string, err error) {
	if shard < 0 || shard >= e.cfg.Shards {
		return "", "", "", fmt.Errorf("cluster: shard %d: want 0 to %d", shard, e.cfg.Shards-1)
	}
	return e.streamName(shard), e.subjectBase(shard) + "lease", e.barrier(shard), nil
}

// lease is what a linearizable read finds of a shard's lease.
type lease struct {
	rev    uint64 // 0: none
	value  []byte
	marker uint64 // for a deleted lease, the sequence of its delete marker
	id     string // the id of the last write (the value's or the marker's)
}

// Get implements replog.Leases. Like Last, the answer is confirmed through the shard stream's
// quorum, so a node never reads a lease older than one another node has written and been told is
// written.
func (e *Engine) Get(ctx context.Context, shard int) (uint64, []byte, error) {
	stream, subject, barrier, err := e.leaseWhere(shard)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: lease get: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	l, err := e.getLease(ctx, stream, subject, barrier)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: lease get of shard %d: %w", shard, err)
	}
	return l.rev, l.value, nil
}

func (e *Engine) getLease(ctx context.Context, stream, subject, barrier string) (lease, error) {
	seq, hdr, data, err := e.confirmedLast(ctx, stream, subject, barrier)
	if err != nil || seq == 0 {
		return lease{}, err
	}
	if hdr.Get(leaseOp) == leaseDel {
		return lease{marker: seq, id: hdr.Get(leaseID)}, nil
	}
	return lease{rev: seq, value: data, id: hdr.Get(leaseID)}, nil
}

// leaseMsg is a write of a lease: rolling the subject up, with an id of its own.
func leaseMsg(subject string, value []byte) (*nats.Msg, string) {
	id := nuid.Next()
	m := &nats.Msg{Subject: subject, Data: value, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(leaseID, id)
	return m, id
}

// Put implements replog.Leases. The new revision is the sequence of the write in the shard's
// stream; a creation over a deleted lease expects its delete marker, so revisions never repeat.
// A refusal stands (ErrLeaseConflict) only once a read through the quorum shows that the lease
// moved on and does not hold this write; if the outcome cannot be told, the error matches
// replog.ErrUnknown.
func (e *Engine) Put(ctx context.Context, shard int, value []byte, rev uint64) (uint64, error) {
	stream, subject, barrier, err := e.leaseWhere(shard)
	if err != nil {
		return 0, fmt.Errorf("cluster: lease put: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	fail := func(err error) (uint64, error) {
		return 0, fmt.Errorf("cluster: lease put of shard %d at revision %d: %w", shard, rev, err)
	}
	expect := rev
	if rev == 0 {
		// The lease must not exist; it may exist as a delete marker, which counts as absent.
		l, err := e.getLease(ctx, stream, subject, barrier)
		if err != nil {
			return fail(err)
		}
		if l.rev != 0 {
			return fail(fmt.Errorf("the lease is at %d: %w", l.rev, replog.ErrLeaseConflict))
		}
		expect = l.marker
	}
	for {
		m, id := leaseMsg(subject, value)
		ack, err := e.publish(ctx, m, jetstream.WithExpectLastSequencePerSubject(expect))
		switch {
		case err == nil:
			return ack.Sequence, nil
		case !isConflict(err):
			return fail(fmt.Errorf("%w (%w)", replog.ErrUnknown, err))
		}
		// As for Append: the refusal may come from a server that no longer leads while the new
		// leader stores the write.
		l, gerr := e.getLease(ctx, stream, subject, barrier)
		switch {
		case gerr != nil:
			return fail(fmt.Errorf("refused (%v), but checking the refusal: %w: %w", err, gerr, replog.ErrUnknown))
		case l.id == id && l.rev != 0:
			return l.rev, nil // stored after all
		case rev != 0 && l.rev == rev, rev == 0 && l.rev == 0 && l.marker == expect:
			return fail(fmt.Errorf("refused (%v), but the lease is still at the revision expected: %w", err, replog.ErrUnknown))
		case rev == 0 && l.rev == 0:
			expect = l.marker // deleted again meanwhile: still absent, so create it over the new marker
			continue
		}
		return fail(fmt.Errorf("%w (%v)", replog.ErrLeaseConflict, err))
	}
}

// Delete implements replog.Leases: a delete marker written if the lease is at rev.
func (e *Engine) Delete(ctx context.Context, shard int, rev uint64) error {
	stream, subject, barrier, err := e.leaseWhere(shard)
	if err != nil {
		return fmt.Errorf("cluster: lease delete: %w", err)
	}
	if rev == 0 {
		return fmt.Errorf("cluster: lease delete of shard %d at revision 0: %w", shard, replog.ErrLeaseConflict)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	m, id := leaseMsg(subject, nil)
	m.Header.Set(leaseOp, leaseDel)
	_, err = e.publish(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	switch {
	case err == nil:
		return nil
	case !isConflict(err):
		return fmt.Errorf("cluster: lease delete of shard %d at revision %d: %w (%w)", shard, rev, replog.ErrUnknown, err)
	}
	l, gerr := e.getLease(ctx, stream, subject, barrier)
	switch {
	case gerr != nil:
		return fmt.Errorf("cluster: lease delete of shard %d at revision %d: refused (%v), but checking the refusal: %w: %w", shard, rev, err, gerr, replog.ErrUnknown)
	case l.rev == 0 && l.id == id:
		return nil // stored after all
	case l.rev == rev:
		return fmt.Errorf("cluster: lease delete of shard %d at revision %d: refused (%v), but the lease is still at it: %w", shard, rev, err, replog.ErrUnknown)
	}
	return fmt.Errorf("cluster: lease delete of shard %d at revision %d: %w (%v)", shard, rev, replog.ErrLeaseConflict, err)
}
