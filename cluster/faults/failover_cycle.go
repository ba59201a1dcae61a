package faults

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"
)

// objectGroups names the streams (raft groups) an object's writes go through: its shard's stream,
// which holds the shard's lease and the object's log and snapshots (the shard by the engine's
// hash: FNV-1a of the key modulo the shards).
func objectGroups(key string, shards int) []string {
	return []string{engineConfig(NodeSpec{}).Prefix + "_log_" + strconv.Itoa(objectShard(key, shards))}
}

// objectShard is key's shard, as the engine places it.
func objectShard(key string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(shards))
}

// clusterView is what the nodes said of the cluster before a kill.
type clusterView struct {
	meta   string              // the meta leader
	leads  map[string][]string // node -> the streams it leads
	owners map[string]string   // key -> the node that holds its shard's lease (or acknowledged its last write)
}

// view asks the nodes' status. A key's owner is the node that says it holds the key's shard: the
// node that acknowledged its last write may have sent it on to the owner. Failing that, it is the
// node that acknowledged it.
func (f *failover) view() clusterView {
	v := clusterView{leads: map[string][]string{}, owners: f.owners()}
	votes := map[string]int{}
	holds := map[int]string{} // shard -> the node that says it holds it
	for name, st := range f.statuses() {
		v.leads[name] = st.Leads
		votes[st.MetaLeader]++
		for shard, o := range st.Owners {
			if o == name {
				holds[shard] = name
			}
		}
	}
	for _, key := range f.keys {
		if o, ok := holds[objectShard(key, f.cfg.Shards)]; ok {
			v.owners[key] = o
		}
	}
	for m, n := range votes {
		if m != "" && n > votes[v.meta] {
			v.meta = m
		}
	}
	return v
}

func (v clusterView) owns(node string) int {
	n := 0
	for _, o := range v.owners {
		if o == node {
			n++
		}
	}
	return n
}

// pick chooses the node to lose in scenario s, and says how it falls short of what s wants ("" if
// it does not).
func (f *failover) pick(s string, v clusterView) (victim, short string) {
	type cand struct {
		name         string
		leads, owns  int
		meta, wanted bool
		score        int
	}
	var cs []cand
	for _, name := range f.names {
		c := cand{name: name, leads: len(v.leads[name]), owns: v.owns(name), meta: v.meta == name}
		switch s {
		case ScenarioNoLeader:
			c.wanted = c.owns > 0 // its leaderships are handed over next
			c.score = c.owns - 10*c.leads - 100*b2i(c.meta)
		case ScenarioLeader:
			c.wanted = c.leads > 0 && c.owns == 0 && !c.meta
			c.score = 1000*b2i(c.leads > 0) + c.leads - 10*c.owns - 100*b2i(c.meta)
		case ScenarioMetaOnly:
			c.wanted = c.meta && c.owns == 0
			c.score = 1000*b2i(c.meta) - 10*c.owns
		case ScenarioBoth, ScenarioDrain:
			c.wanted = c.leads > 0 && c.owns > 0 && !c.meta
			c.score = 1000*b2i(c.leads > 0 && c.owns > 0) + min(c.leads, c.owns) - 100*b2i(c.meta)
		case ScenarioMeta:
			c.wanted = c.meta
			c.score = 100 * b2i(c.meta)
		case ScenarioReplaced:
			c.wanted = c.owns > 0
			c.score = c.owns
		}
		cs = append(cs, c)
	}
	best := slices.MaxFunc(cs, func(a, b cand) int {
		if a.wanted != b.wanted {
			return b2i(a.wanted) - b2i(b.wanted)
		}
		return a.score - b.score
	})
	if !best.wanted {
		short = fmt.Sprintf("no node fits scenario %s; %s leads %d streams, owns %d objects, meta leader %v", s, best.name, best.leads, best.owns, best.meta)
	}
	return best.name, short
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stepDown asks node to hand every raft leadership it holds over (its streams' and the meta
// group's: POST /handover), until it leads none (within 30 s), and returns the view after.
func (f *failover) stepDown(node string, v clusterView) clusterView {
	deadline := time.Now().Add(30 * time.Second)
	url := fmt.Sprintf("http://127.0.0.1:%d/handover", f.proc(node).spec.ServePort)
	for (len(v.leads[node]) > 0 || v.meta == node) && time.Now().Before(deadline) {
		if resp, err := f.hc.Post(url, "", nil); err == nil {
			resp.Body.Close()
		}
		v = f.view()
	}
	return v
}

// moveMeta moves the JetStream meta leadership to a node that owns as few objects as any (within
// 30 s): the meta leader, if it is not one, is asked to hand its leaderships over (POST
// /handover), which gives the meta group to another node at random, until one such leads it. It
// returns the view after.
func (f *failover) moveMeta(v clusterView) clusterView {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		fewest := len(f.keys)
		for _, name := range f.names {
			fewest = min(fewest, v.owns(name))
		}
		if v.meta != "" && v.owns(v.meta) == fewest {
			return v
		}
		if v.meta != "" {
			url := fmt.Sprintf("http://127.0.0.1:%d/handover", f.proc(v.meta).spec.ServePort)
			if resp, err := f.hc.Post(url, "", nil); err == nil {
				resp.Body.Close()
			}
		}
		time.Sleep(100 * time.Millisecond)
		v = f.view()
	}
	return v
}

// cycle is one kill of scenario s: it waits for a ready cluster that serves every object, loses a
// node as s says, measures every object's time to its first acknowledged write after the loss,
// and starts the node again.
func (f *failover) cycle(s string, k int) {
	f.waitReady(3 * time.Minute)
	f.settle()
	v := f.view()
	victim, short := "", ""
	if s == ScenarioMetaOnly {
		v = f.moveMeta(v)
		f.settle()
		v = f.view()
	}
	if s != ScenarioAll {
		victim, short = f.pick(s, v)
		if s == ScenarioNoLeader {
			v = f.stepDown(victim, v)
			f.settle()
			v.owners = f.owners()
			if len(v.leads[victim]) > 0 || v.meta == victim {
				short = fmt.Sprintf("%s still leads %v (meta leader: %v) after handing its leaderships over", victim, v.leads[victim], v.meta == victim)
			} else {
				short = ""
			}
		}
	}
	if short != "" {
		f.cfg.Logf("faults: failover %s kill %d: %s", s, k, short)
	}
	led := v.leads[victim]
	wasMeta := victim != "" && v.meta == victim
	class := map[string]string{}
	for _, key := range f.keys {
		owner := v.owners[key] == victim
		group := false
		for _, g := range objectGroups(key, f.cfg.Shards) {
			group = group || slices.Contains(led, g)
		}
		switch {
		case s == ScenarioAll:
			class[key] = "all"
		case owner && group:
			class[key] = "both"
		case owner:
			class[key] = "owner"
		case group:
			class[key] = "group"
		default:
			class[key] = "other"
		}
		if wasMeta && owner {
			class[key] += "+meta" // its takeover may need the meta group, which elects too
		}
	}

	// Lose the node (or all), and time the elections of what it led.
	var t0 time.Time
	var election time.Duration
	var wg sync.WaitGroup
	f.traceFrom(time.Now())
	switch s {
	case ScenarioAll:
		for _, p := range f.h.procs {
			p.kill()
		}
		for _, p := range f.h.procs {
			f.h.launch(p)
		}
		t0 = time.Now()
	case ScenarioReplaced:
		p := f.proc(victim)
		t0 = time.Now()
		p.kill()
		wg.Go(func() { election = f.elected(t0, victim, led, wasMeta) })
		f.removeDir(p)
		f.h.launch(p)
	case ScenarioDrain:
		p := f.proc(victim)
		t0 = time.Now()
		wg.Go(func() { election = f.elected(t0, victim, led, wasMeta) })
		p.term()
		f.h.launch(p)
	default:
		p := f.proc(victim)
		t0 = time.Now()
		p.kill()
		wg.Go(func() { election = f.elected(t0, victim, led, wasMeta) })
	}
	f.cfg.Logf("faults: failover %s kill %d: %s (leads %v, meta leader %v, owns %d of %d objects)", s, k, orAll(victim), led, wasMeta, v.owns(victim), len(f.keys))

	// Wait for every object's first acknowledged write after the loss.
	var samples []Sample
	for _, key := range f.keys {
		smp := Sample{Scenario: s, Class: class[key], Kill: k, Key: key, Victim: orAll(victim)}
		for {
			if a, ok := f.firstAck(key, t0); ok {
				smp.Took, smp.Served = a.end.Sub(t0), true
				break
			}
			if time.Since(t0) > f.cfg.Cap {
				smp.Took = f.cfg.Cap
				f.cfg.Logf("faults: failover %s kill %d: %s (%s) not served within %v", s, k, key, class[key], f.cfg.Cap)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		samples = append(samples, smp)
	}
	wg.Wait()
	for i := range samples {
		samples[i].Election = election
	}
	f.printTrace(samples, t0)
	f.rep.Samples = append(f.rep.Samples, samples...)
	if victim != "" && !f.proc(victim).running() {
		f.h.launch(f.proc(victim))
	}
}

func orAll(victim string) string {
	if victim == "" {
		return "all"
	}
	return victim
}

// elected polls the other nodes from t0 until one of them leads each stream in led, and the meta
// group too if victim led it, and returns how long that took (the cap if it did not
// happen within it; 0 if victim led nothing).
func (f *failover) elected(t0 time.Time, victim string, led []string, meta bool) time.Duration {
	if len(led) == 0 && !meta {
		return 0
	}
	for time.Since(t0) < f.cfg.Cap {
		metaDone := !meta
		var leads []string // the streams the other nodes lead
		for name, st := range f.statuses() {
			if name == victim {
				continue
			}
			leads = append(leads, st.Leads...)
			metaDone = metaDone || st.MetaLeader != "" && st.MetaLeader != victim
		}
		done := metaDone
		for _, s := range led {
			done = done && slices.Contains(leads, s)
		}
		if done {
			return time.Since(t0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return f.cfg.Cap
}
