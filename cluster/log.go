package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-go/durable/replog"
)

// Append implements replog.Log. An acknowledgement that does not come within AttemptTimeout, or is
// lost to a dropped connection, is replog.ErrUnknown, never retried into a false conflict or
// success: the record is sent again only after a refusal that stored nothing (no leader to take
// it, or an earlier append to the key still in flight at the leader).
func (e *Engine) Append(ctx context.Context, key string, expect uint64, rec []byte) (uint64, error) {
	stream, subject, barrier, err := e.where(key)
	if err != nil {
		return 0, fmt.Errorf("cluster: append: %w", err)
	}
	if len(rec) > MaxRecord {
		return 0, fmt.Errorf("cluster: append to %q: a record of %d bytes: at most %d", key, len(rec), MaxRecord)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	ack, err := e.publish(ctx, &nats.Msg{Subject: subject, Data: rec}, jetstream.WithExpectLastSequencePerSubject(expect))
	switch {
	case err == nil:
		return ack.Sequence, nil
	case isConflict(err):
		// During a change of leader, a server that still believes it leads can refuse the
		// append while the new leader stores it, and the refusal may come back first. So a
		// refusal stands only once a read through the quorum shows another record after expect.
		if verr := e.confirmConflict(ctx, stream, subject, barrier, expect, rec); verr != nil {
			return 0, fmt.Errorf("cluster: append to %q expecting %d: refused (%v), but %w: %w", key, expect, err, verr, replog.ErrUnknown)
		}
		return 0, fmt.Errorf("cluster: append to %q expecting %d: %w (%v)", key, expect, replog.ErrConflict, err)
	default:
		return 0, fmt.Errorf("cluster: append to %q expecting %d: %w (%w)", key, expect, replog.ErrUnknown, err)
	}
}

// confirmConflict returns nil if the key's record after expect is there and is not rec (so the
// append that expected it cannot be stored, now or later), and an error saying why not otherwise.
func (e *Engine) confirmConflict(ctx context.Context, stream, subject, barrier string, expect uint64, rec []byte) error {
	last, _, _, err := e.confirmedLast(ctx, stream, subject, barrier)
	switch {
	case err != nil:
		return fmt.Errorf("checking the refusal: %w", err)
	case last == expect:
		return errors.New("the key's last record is still the one expected: the append may yet be stored")
	case last < expect:
		return nil // expect was never a record of the key's
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var recs []record
		err := e.retry(ctx, func(ctx context.Context) (err error) {
			recs, err = e.readBatch(ctx, stream, subject, expect+1, last, 1)
			return err
		})
		if err != nil {
			return fmt.Errorf("checking the refusal: %w", err)
		}
		if len(recs) > 0 {
			if bytes.Equal(recs[0].data, rec) {
				return fmt.Errorf("the record after %d, at %d, is this one", expect, recs[0].seq)
			}
			return nil
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("checking the refusal: %w", err)
		}
	}
}

// Last implements replog.Log. The answer is linearizable: it is the key's last record as of a
// barrier written through the stream's quorum after the call, read from a replica that has the
// barrier. A leader cut off from its quorum, that does not know yet that another has replaced it,
// cannot write the barrier, so a stale record is never returned. It costs one small replicated
// write.
func (e *Engine) Last(ctx context.Context, key string) (uint64, []byte, error) {
	stream, subject, barrier, err := e.where(key)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: last: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	seq, _, data, err := e.confirmedLast(ctx, stream, subject, barrier)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: last of %q: %w", key, err)
	}
	return seq, data, nil
}

// confirmedLast returns subject's last message in stream, as the stream's quorum agrees it is.
// Reading is safe to repeat, so it tries again (each try bounded by AttemptTimeout) until ctx
// ends: through a leader election, a stream just created, a node restarting.
func (e *Engine) confirmedLast(ctx context.Context, stream, subject, barrier string) (seq uint64, hdr nats.Header, data []byte, err error) {
	err = e.retry(ctx, func(ctx context.Context) (err error) {
		seq, hdr, data, err = e.tryConfirmedLast(ctx, stream, subject, barrier)
		return err
	})
	return seq, hdr, data, err
}

// tryConfirmedLast writes a barrier through the stream's quorum, then asks any replica for the
// subject's last message up to the barrier, from a replica that has the barrier: a replica holds
// only what its quorum committed, in order, so its answer is the subject's last message as of
// the barrier, which lies between the call and the return. (The barrier expects nothing, so it
// never makes an append to the subject fail.)
func (e *Engine) tryConfirmedLast(ctx context.Context, stream, subject, barrier string) (uint64, nats.Header, []byte, error) {
	upTo, err := e.writeBarrier(ctx, barrier)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read barrier: %w", err)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		found, seq, hdr, data, err := e.lastUpTo(ctx, stream, subject, barrier, upTo)
		if err != nil || found {
			return seq, hdr, data, err
		}
		// The replica that answered has not applied the barrier yet.
		if err := sleep(ctx, wait); err != nil {
			return 0, nil, nil, fmt.Errorf("waiting for a replica to apply the read barrier: %w", err)
		}
	}
}

// writeBarrier publishes a read barrier and returns its sequence. A barrier is safe to write
// twice, so one without an acknowledgement after hedgeAfter is sent again, and so on until ctx
// ends (an attempt's), each with a reply subject of its own, and the first acknowledgement counts:
// a barrier sent to a leader that has just been stopped or cut off (its peers still route the
// stream's subjects to it) gets none, and the one sent again reaches the new leader as soon as
// there is one.
func (e *Engine) writeBarrier(ctx context.Context, barrier string) (uint64, error) {
	inbox := e.nc.NewInbox()
	answers, err := e.subscribeReplies(inbox + ".*")
	if err != nil {
		return 0, err
	}
	defer answers.close()
	m := &nats.Msg{Subject: barrier, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgTTLHeader, barrierTTL)
	sent := 0
	send := func() error {
		sent++
		m.Reply = inbox + "." + strconv.Itoa(sent)
		return e.nc.PublishMsg(m)
	}
	if err := send(); err != nil {
		return 0, err
	}
	for {
		wait, cancel := context.WithTimeout(ctx, e.hedgeAfter())
		a, err := answers.next(wait)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			if err := send(); err != nil {
				return 0, err
			}
			continue
		case err != nil:
			return 0, err
		case a.Header.Get("Status") == "503":
			return 0, errors.New("no leader takes it (no responders)")
		}
		var ack struct {
			Seq   uint64              `json:"seq"`
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(a.Data, &ack); err != nil {
			return 0, err
		}
		if ack.Error != nil {
			return 0, ack.Error
		}
		return ack.Seq, nil
	}
}

// barrierTTL is how long a read barrier stays in its stream: long enough for a replica to apply
// it while a read waits for it (a read's attempt lasts at most AttemptTimeout).
const barrierTTL = "30s"

// lastUpTo asks a replica for the last messages up to sequence upTo of subject and barrier; found
// is whether the replica has the barrier message at upTo.
func (e *Engine) lastUpTo(ctx context.Context, stream, subject, barrier string, upTo uint64) (found bool, seq uint64, hdr nats.Header, data []byte, err error) {
	req, _ := json.Marshal(map[string]any{"multi_last": []string{subject, barrier}, "up_to_seq": upTo})
	err = e.directGet(ctx, stream, req, func(mseq uint64, m *nats.Msg) {
		switch m.Header.Get("Nats-Subject") {
		case barrier:
			found = mseq == upTo
		case subject:
			seq, hdr, data = mseq, m.Header, m.Data
			if data == nil {
				data = []byte{}
			}
		}
	})
	if err != nil {
		return false, 0, nil, nil, err
	}
	return found, seq, hdr, data, nil
}

// directGet sends a batched direct get to whichever replica of stream answers, and calls fn with
// each message of the answer. A replica answers direct gets without the stream's leader or the
// JetStream meta leader.
//
// The replicas answer as a queue group, and a server passes a request to a member at random, a
// remote one as well as its own: one on a node that is stopped or cut off, whose route its peers
// have not closed yet (that takes their pings minutes), takes requests and answers none. So a
// request that has no answer after hedgeAfter is sent again, to another member at random, and so
// on until ctx ends (an attempt's), each with a reply subject of its own; the first to answer is
// read to its end, the others are ignored.
func (e *Engine) directGet(ctx context.Context, stream string, req []byte, fn func(seq uint64, m *nats.Msg)) error {
	inbox := e.nc.NewInbox()
	answers, err := e.subscribeReplies(inbox + ".*")
	if err != nil {
		return err
	}
	defer answers.close()
	sent := 0
	send := func() error {
		sent++
		return e.nc.PublishRequest(e.apiPfx+".DIRECT.GET."+stream, inbox+"."+strconv.Itoa(sent), req)
	}
	if err := send(); err != nil {
		return err
	}
	chosen := "" // the reply subject of the answer being read
	for {
		wait := ctx
		var cancel context.CancelFunc = func() {}
		if chosen == "" {
			wait, cancel = context.WithTimeout(ctx, e.hedgeAfter())
		}
		m, err := answers.next(wait)
		cancel()
		if err != nil && chosen == "" && ctx.Err() == nil {
			if err := send(); err != nil { // no answer yet: ask another replica
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("direct get: %w", err)
		}
		if chosen == "" {
			chosen = m.Subject
		} else if m.Subject != chosen {
			continue // a later answer to an earlier or later try
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204", "404": // the end of the batch; nothing (more) there
				return nil
			case "503": // no replica answers yet (the stream was just created, or is moving)
				return nil
			default:
				return statusError{status, m.Header.Get("Description")}
			}
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return fmt.Errorf("direct get: a message without a sequence: %w", err)
		}
		fn(seq, m)
	}
}

// hedgeAfter is how long a direct get waits for an answer before it is sent again: a replica
// answers in milliseconds.
func (e *Engine) hedgeAfter() time.Duration { return min(200*time.Millisecond, e.cfg.AttemptTimeout/8) }

// readBatch is how many records one round trip of Read brings at most.
const readBatch = 512

// Read implements replog.Log. It finds the key's last record (as Last does), then brings the records
// up to it in batches of up to 512 (one round trip each) from whichever replica answers, waiting
// for a replica that is behind to catch up. fn runs between round trips, under ctx alone.
func (e *Engine) Read(ctx context.Context, key string, after uint64, fn func(uint64, []byte) error) error {
	stream, subject, barrier, err := e.where(key)
	if err != nil {
		return fmt.Errorf("cluster: read: %w", err)
	}
	bctx, cancel := e.bound(ctx)
	until, _, _, err := e.confirmedLast(bctx, stream, subject, barrier)
	cancel()
	if err != nil {
		return fmt.Errorf("cluster: read of %q: %w", key, err)
	}
	next := after + 1
	var behindSince time.Time
	for wait := time.Millisecond; next <= until; {
		var recs []record
		bctx, cancel := e.bound(ctx)
		err := e.retry(bctx, func(ctx context.Context) (err error) {
			recs, err = e.readBatch(ctx, stream, subject, next, until, readBatch)
			return err
		})
		cancel()
		if err != nil {
			return fmt.Errorf("cluster: read of %q: %w", key, err)
		}
		if len(recs) == 0 {
			// The replica that answered has nothing after next yet: it is behind the leader.
			if behindSince.IsZero() {
				behindSince = time.Now()
			} else if time.Since(behindSince) > e.cfg.Timeout {
				return fmt.Errorf("cluster: read of %q: record %d did not reach the replicas within %v", key, until, e.cfg.Timeout)
			}
			if err := sleep(ctx, wait); err != nil {
				return fmt.Errorf("cluster: read of %q: %w", key, err)
			}
			wait = min(2*wait, 50*time.Millisecond)
			continue
		}
		behindSince, wait = time.Time{}, time.Millisecond
		for _, r := range recs {
			if err := fn(r.seq, r.data); err != nil {
				return err
			}
		}
		next = recs[len(recs)-1].seq + 1
	}
	return nil
}

type record struct {
	seq  uint64
	hdr  nats.Header
	data []byte
}

// readBatch brings one batch of subject's records from next on, up to until, from one replica.
func (e *Engine) readBatch(ctx context.Context, stream, subject string, next, until uint64, batch int) ([]record, error) {
	req, _ := json.Marshal(map[string]any{"seq": next, "next_by_subj": subject, "batch": batch, "max_bytes": MaxPayload})
	var recs []record
	err := e.directGet(ctx, stream, req, func(seq uint64, m *nats.Msg) {
		if seq < next || seq > until {
			return // past the bound: drain the batch up to its end
		}
		data := m.Data
		if data == nil {
			data = []byte{}
		}
		recs = append(recs, record{seq, m.Header, data})
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// Trim implements replog.Log: a purge of key's subject before the sequence, through the stream's
// quorum. Trimming past the last record removes it too, after which the key has no last record.
func (e *Engine) Trim(ctx context.Context, key string, before uint64) error {
	stream, subject, _, err := e.where(key)
	if err != nil {
		return fmt.Errorf("cluster: trim: %w", err)
	}
	if before <= 1 {
		return nil // there is nothing before the first sequence (and a purge at 0 would purge all)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	if err := e.purge(ctx, stream, subject, before); err != nil {
		return fmt.Errorf("cluster: trim of %q before %d: %w", key, before, err)
	}
	return nil
}

// JetStream's error codes that purge tells apart.
const (
	errCodeClusterNotAvailable = 10008 // "JetStream system temporarily unavailable"
	errCodeStreamNotFound      = 10059
)

// purge removes stream's messages on the subjects that filter matches, those before sequence
// before (all of them if before is 0). It is sent again, each attempt bounded by AttemptTimeout,
// until it is done or ctx ends: a purge is safe to repeat.
//
// A purge goes to the stream's leader, which answers once the stream's quorum has applied it; the
// JetStream meta leader has no part in it. But while the meta group has had no leader for a few
// seconds, the stream's other replicas answer it too, with "temporarily unavailable", and may
// answer first: purge waits for the leader's answer past those.
func (e *Engine) purge(ctx context.Context, stream, filter string, before uint64) error {
	r := map[string]any{"filter": filter}
	if before > 0 {
		r["seq"] = before
	}
	req, _ := json.Marshal(r)
	return e.retry(ctx, func(ctx context.Context) error {
		inbox := e.nc.NewRespInbox()
		answers, err := e.subscribeReplies(inbox)
		if err != nil {
			return permanent{err}
		}
		defer answers.close()
		if err := e.nc.PublishRequest(e.apiPfx+".STREAM.PURGE."+stream, inbox, req); err != nil {
			return permanent{err}
		}
		for {
			m, err := answers.next(ctx)
			if err != nil {
				return fmt.Errorf("purge: %w", err)
			}
			if m.Header.Get("Status") == "503" {
				return errors.New("purge: no server answers")
			}
			var resp struct {
				Success bool                `json:"success"`
				Error   *jetstream.APIError `json:"error"`
			}
			if err := json.Unmarshal(m.Data, &resp); err != nil {
				return permanent{fmt.Errorf("purge: %w", err)}
			}
			switch {
			case resp.Error == nil && resp.Success:
				return nil
			case resp.Error == nil:
				return errors.New("purge: not done")
			case resp.Error.ErrorCode == errCodeClusterNotAvailable:
				continue // a replica that sees no meta leader: the stream's leader answers too
			case resp.Error.ErrorCode == errCodeStreamNotFound:
				return permanent{fmt.Errorf("purge: %w", resp.Error)}
			default:
				return fmt.Errorf("purge: %w", resp.Error)
			}
		}
	})
}
