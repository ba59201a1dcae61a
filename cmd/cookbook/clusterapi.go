package main

import "net/http"

// clusterView is GET /api/cluster's answer: what this node's table says
// of the cluster, for the page's cluster panel. Outside cluster mode only
// ClusterMode, false.
type clusterView struct {
	ClusterMode bool            `json:"clusterMode"`
	Node        string          `json:"node,omitempty"`     // the node that answers
	Ready       bool            `json:"ready"`              // it can serve (GET /readyz)
	NotReady    string          `json:"notReady,omitempty"` // why not
	Members     []clusterMember `json:"members,omitempty"`
	Shards      []shardOwner    `json:"shards,omitempty"` // every shard, in order
}

type clusterMember struct {
	Name     string `json:"name"`
	Address  string `json:"address"`
	Alive    bool   `json:"alive"`
	Ready    bool   `json:"ready"`
	Draining bool   `json:"draining"`
	Shards   []int  `json:"shards"`
}

// shardOwner is a shard and the live node holding it, "" if none is known.
type shardOwner struct {
	Shard   int    `json:"shard"`
	Owner   string `json:"owner"`
	Address string `json:"address"`
}

// cluster answers GET /api/cluster from the runtime's Stats: the members,
// alive or not, and each shard's owner, as this node knows them now.
func (a *app) cluster(*http.Request) (any, error) {
	cs := a.rt.Stats().Cluster
	if cs.Node == "" {
		return map[string]bool{"clusterMode": false}, nil
	}
	v := clusterView{ClusterMode: true, Node: cs.Node, Ready: cs.Ready == nil, Members: []clusterMember{}, Shards: []shardOwner{}}
	if cs.Ready != nil {
		v.NotReady = cs.Ready.Error()
	}
	addr := map[string]string{}
	for _, m := range cs.Nodes {
		addr[m.Name] = m.Address
		v.Members = append(v.Members, clusterMember{Name: m.Name, Address: m.Address, Alive: m.Alive, Ready: m.Ready,
			Draining: m.Draining, Shards: append([]int{}, m.Shards...)})
	}
	for shard := range cs.Shards {
		owner := cs.Owners[shard]
		v.Shards = append(v.Shards, shardOwner{Shard: shard, Owner: owner, Address: addr[owner]})
	}
	return v, nil
}
