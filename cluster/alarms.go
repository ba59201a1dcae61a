package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/durable-go/durable/replog"
)

// A key's alarm entry is one subject of the key's shard stream, "<prefix>.log.<n>.a.<h>.<encoded
// key>", where h is one hex digit of a hash of the key: the entry shares the raft group of the
// key's records and lease. Each write expects the subject's last sequence (compare-and-set) and
// rolls the subject up, so one message per entry stays; a revision is the write's stream
// sequence. A removal is a marker message (alarmOp: "del") that expires after alarmDelTTL: until
// then a write expects the marker's sequence. Each write carries an id of its own (alarmID), by
// which a write refused by a server that no longer led, while the new leader stored it, is known
// for what it is. The time is the header alarmAt, in Unix nanoseconds.
//
// A shard's entries are listed by one batched direct get of the last message of each subject
// under "a.>" (no consumer, so nothing for the meta leader), up to a read barrier, and of the
// barrier itself: an answer without it comes from a replica that has not applied the barrier yet,
// which may lack entries, and another replica is asked. A server answers at most 1024 subjects
// per such get, the barrier one of them, so a shard with more is listed by its 16 groups
// "a.<h>.>" one after the other: 16,368 entries per shard at most (removal markers count until
// they expire).
const (
	alarmAt     = "Durable-Alarm-At"
	alarmOp     = "Durable-Alarm-Op"
	alarmDel    = "del"
	alarmID     = "Durable-Alarm-Id"
	alarmDelTTL = "1h"
)

// alarmWhere returns the stream, subject and barrier of key's alarm entry.
func (e *Engine) alarmWhere(key string) (stream, subject, barrier string, err error) {
	enc, err := encodeKey(key)
	if err != nil {
		return "", "", "", err
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	shard := e.ShardOf(key)
	return e.streamName(shard), e.subjectBase(shard) + "a." + strconv.FormatUint(uint64(h.Sum32()>>28), 16) + "." + enc,
		e.barrier(shard), nil
}

// alarmEntry is what a linearizable read finds of a key's alarm entry.
type alarmEntry struct {
	at  time.Time // zero: none
	rev uint64    // 0: never written (or its removal expired)
	id  string    // the id of the last write
}

func parseAlarm(seq uint64, hdr nats.Header) (alarmEntry, error) {
	a := alarmEntry{rev: seq, id: hdr.Get(alarmID)}
	if hdr.Get(alarmOp) == alarmDel {
		return a, nil
	}
	ns, err := strconv.ParseInt(hdr.Get(alarmAt), 10, 64)
	if err != nil || ns == 0 {
		return alarmEntry{}, fmt.Errorf("an alarm entry at %d without a time (%q)", seq, hdr.Get(alarmAt))
	}
	a.at = time.Unix(0, ns)
	return a, nil
}

func (e *Engine) getAlarm(ctx context.Context, stream, subject, barrier string) (alarmEntry, error) {
	seq, hdr, _, err := e.confirmedLast(ctx, stream, subject, barrier)
	if err != nil || seq == 0 {
		return alarmEntry{}, err
	}
	return parseAlarm(seq, hdr)
}

// GetAlarm implements replog.Log. Like Last, the answer is confirmed through the shard stream's
// quorum.
func (e *Engine) GetAlarm(ctx context.Context, key string) (time.Time, uint64, error) {
	stream, subject, barrier, err := e.alarmWhere(key)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("cluster: get alarm: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	a, err := e.getAlarm(ctx, stream, subject, barrier)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("cluster: get the alarm of %q: %w", key, err)
	}
	return a.at, a.rev, nil
}

// SetAlarm implements replog.Log. A refusal stands (ErrAlarmMoved) only once a read through the
// quorum shows that the entry moved on and does not hold this write; if the outcome cannot be
// told, the error matches replog.ErrUnknown.
func (e *Engine) SetAlarm(ctx context.Context, key string, at time.Time, rev uint64) (uint64, error) {
	stream, subject, barrier, err := e.alarmWhere(key)
	if err != nil {
		return 0, fmt.Errorf("cluster: set alarm: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	fail := func(err error) (uint64, error) {
		return 0, fmt.Errorf("cluster: set the alarm of %q at revision %d: %w", key, rev, err)
	}
	id := nuid.Next()
	m := &nats.Msg{Subject: subject, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(alarmID, id)
	if at.IsZero() {
		m.Header.Set(alarmOp, alarmDel)
		m.Header.Set(jetstream.MsgTTLHeader, alarmDelTTL)
	} else {
		m.Header.Set(alarmAt, strconv.FormatInt(at.UnixNano(), 10))
	}
	ack, err := e.publish(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	switch {
	case err == nil:
		return ack.Sequence, nil
	case !isConflict(err):
		return fail(fmt.Errorf("%w (%w)", replog.ErrUnknown, err))
	}
	// As for Append: the refusal may come from a server that no longer leads while the new leader
	// stores the write.
	a, gerr := e.getAlarm(ctx, stream, subject, barrier)
	switch {
	case gerr != nil:
		return fail(fmt.Errorf("refused (%v), but checking the refusal: %w: %w", err, gerr, replog.ErrUnknown))
	case a.id == id:
		return a.rev, nil // stored after all
	case a.rev == rev:
		return fail(fmt.Errorf("refused (%v), but the entry is still at the revision expected: %w", err, replog.ErrUnknown))
	}
	return fail(fmt.Errorf("%w (%v)", replog.ErrAlarmMoved, err))
}

// Alarms implements replog.Log: the last message of each entry's subject up to a read barrier,
// so that every write acknowledged before the call is seen.
func (e *Engine) Alarms(ctx context.Context, shard int, fn func(key string, at time.Time, rev uint64) error) error {
	if shard < 0 || shard >= e.cfg.Shards {
		return fmt.Errorf("cluster: alarms: shard %d: want 0 to %d", shard, e.cfg.Shards-1)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	stream, base, barrier := e.streamName(shard), e.subjectBase(shard)+"a.", e.barrier(shard)
	var entries []listedAlarm
	err := e.retry(ctx, func(ctx context.Context) error {
		upTo, err := e.writeBarrier(ctx, barrier)
		if err != nil {
			return fmt.Errorf("read barrier: %w", err)
		}
		entries, err = e.listAlarms(ctx, stream, barrier, []string{base + ">"}, upTo)
		if errors.Is(err, errTooMany) {
			entries = entries[:0]
			for h := range 16 {
				part, err := e.listAlarms(ctx, stream, barrier, []string{base + strconv.FormatUint(uint64(h), 16) + ".>"}, upTo)
				if err != nil {
					return err
				}
				entries = append(entries, part...)
			}
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: alarms of shard %d: %w", shard, err)
	}
	for _, a := range entries {
		if err := fn(a.key, a.at, a.rev); err != nil {
			return err
		}
	}
	return nil
}

// errTooMany is a listing over the server's limit of subjects per batched get.
var errTooMany = permanent{errors.New("more alarm entries than one batched get answers")}

type listedAlarm struct {
	key string
	alarmEntry
}

// listAlarms lists the entries of the subjects that match filters as of the read barrier at upTo
// (a message of subject barrier), from a replica that has applied the barrier. A replica that has
// not (one catching up after a restart or a change of leader) answers with what it holds, which
// may lack entries written long before the listing, or with nothing at all: its answer is
// dropped, and a replica asked again, until one has the barrier or ctx ends.
func (e *Engine) listAlarms(ctx context.Context, stream, barrier string, filters []string, upTo uint64) ([]listedAlarm, error) {
	req, _ := json.Marshal(map[string]any{"multi_last": append(slices.Clone(filters), barrier), "up_to_seq": upTo})
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var out []listedAlarm
		var bad error
		found := false
		err := e.directGetStatus(ctx, stream, req, func(seq uint64, m *nats.Msg) {
			subj := m.Header.Get("Nats-Subject")
			if subj == barrier {
				found = seq == upTo
				return
			}
			a, err := parseAlarm(seq, m.Header)
			if err != nil {
				bad = err
				return
			}
			if a.at.IsZero() {
				return // removed
			}
			key, err := decodeAlarmSubject(subj)
			if err != nil {
				bad = err
				return
			}
			out = append(out, listedAlarm{key, a})
		})
		if err == nil {
			err = bad
		}
		if err != nil || found {
			return out, err
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("waiting for a replica to apply the read barrier: %w", err)
		}
	}
}

// directGetStatus is directGet that tells a listing over the server's limit (413) apart.
func (e *Engine) directGetStatus(ctx context.Context, stream string, req []byte, fn func(seq uint64, m *nats.Msg)) error {
	err := e.directGet(ctx, stream, req, fn)
	if err != nil && isTooMany(err) {
		return errTooMany
	}
	return err
}

// statusError is a status a direct get answered other than its end.
type statusError struct{ status, desc string }

func (s statusError) Error() string { return "direct get: status " + s.status + " " + s.desc }

func isTooMany(err error) bool {
	var s statusError
	return errors.As(err, &s) && s.status == "413"
}

// decodeAlarmSubject returns the key of an alarm entry's subject: "...a.<h>.<encoded key>".
func decodeAlarmSubject(subject string) (string, error) {
	i := len(subject)
	for i > 0 && subject[i-1] != '.' {
		i--
	}
	return decodeKey(subject[i:])
}

// decodeKey reverses encodeKey.
func decodeKey(enc string) (string, error) {
	b := make([]byte, 0, len(enc))
	for i := 0; i < len(enc); i++ {
		if enc[i] != '=' {
			b = append(b, enc[i])
			continue
		}
		if i+2 >= len(enc) {
			return "", fmt.Errorf("cluster: a key token %q cut short", enc)
		}
		v, err := strconv.ParseUint(enc[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("cluster: a key token %q: %w", enc, err)
		}
		b = append(b, byte(v))
		i += 2
	}
	if len(b) == 0 {
		return "", errors.New("cluster: an empty key token")
	}
	return string(b), nil
}
