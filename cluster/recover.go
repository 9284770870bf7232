package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// RecoverResult says what Recover wrote.
type RecoverResult struct {
	// LastIndex is the last log index the data directory held (snapshot or log).
	LastIndex uint64
	// Index is the log index of the new snapshot, LastIndex plus the gap: every token the
	// recovered cluster issues is greater.
	Index uint64
	// Members is the new Raft configuration.
	Members []raft.Server
	// Stats counts the recovered state.
	Stats fsm.Stats
}

// Recover rewrites the Raft configuration of a stopped node's data directory to members (id
// to Raft address, all voters), with hashicorp/raft's RecoverCluster, so that a surviving
// minority of a cluster that lost its majority starts again as a new, smaller cluster with
// its state. It refuses while the data directory is in use (ErrDataDirInUse) and when it
// holds no Raft state.
//
// RecoverCluster treats every entry in the log as committed, including any that the lost
// majority never acknowledged, and the lost nodes may have committed entries this one never
// received: the new snapshot's index is therefore the last index held plus gap (see
// DefaultIndexGap), so that the recovered cluster's fencing tokens are greater than any the
// old one issued, unless it went on for more than gap entries without this node.
func Recover(dataDir string, members map[string]string, gap uint64, logger hclog.Logger) (RecoverResult, error) {
	if len(members) == 0 {
		return RecoverResult{}, errors.New("cluster: recover: no members given")
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return RecoverResult{}, err
	}
	defer lock.release()
	kind, err := detectLogStore(dataDir)
	if err != nil {
		return RecoverResult{}, err
	}
	if kind == "" {
		return RecoverResult{}, fmt.Errorf("cluster: recover: %s holds no Raft log store: is it a node's --data-dir?", dataDir)
	}
	store, err := openLogStore(kind, dataDir, 0, false, nil, logger)
	if err != nil {
		return RecoverResult{}, err
	}
	defer store.Close()
	files, err := raft.NewFileSnapshotStoreWithLogger(dataDir, 2, logger.Named("snapshot"))
	if err != nil {
		return RecoverResult{}, fmt.Errorf("cluster: open snapshot store: %w", err)
	}
	snaps := &gapSnapshots{SnapshotStore: sizedSnapshots{durableSnapshots{SnapshotStore: files, dir: filepath.Join(dataDir, "snapshots")}}, gap: gap}
	last, err := store.LastIndex()
	if err != nil {
		return RecoverResult{}, fmt.Errorf("cluster: recover: %w", err)
	}
	if list, err := snaps.List(); err == nil && len(list) > 0 {
		last = max(last, list[0].Index)
	}
	if _, err := indexAfterGap(last, gap); err != nil {
		return RecoverResult{}, fmt.Errorf("cluster: recover: %w: use a smaller --index-gap", err)
	}

	var conf raft.Configuration
	for id, addr := range members {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	}
	sort.Slice(conf.Servers, func(i, j int) bool { return conf.Servers[i].ID < conf.Servers[j].ID })
	rc := raft.DefaultConfig()
	rc.LocalID = conf.Servers[0].ID
	rc.Logger = logger.Named("raft")
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	machine := fsm.New(nil)
	if err := recoverCluster(rc, machine, store, snaps, trans, conf); err != nil {
		return RecoverResult{}, fmt.Errorf("cluster: recover: %w", err)
	}
	if snaps.created == 0 {
		return RecoverResult{}, errors.New("cluster: recover: no snapshot was written")
	}
	markRecovered(dataDir)
	return RecoverResult{LastIndex: snaps.created - gap, Index: snaps.created, Members: conf.Servers, Stats: machine.Stats()}, nil
}

// gapSnapshots is a snapshot store whose new snapshots are placed gap entries further on in
// the log than asked; Recover uses it for the snapshot RecoverCluster writes.
type gapSnapshots struct {
	raft.SnapshotStore
	gap     uint64
	created uint64 // the index of the last snapshot created
}

// Create creates a snapshot at index+gap.
func (s *gapSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	created, err := indexAfterGap(index, s.gap)
	if err != nil {
		return nil, err
	}
	s.created = created
	return s.SnapshotStore.Create(version, s.created, term, configuration, configurationIndex, trans)
}

// recoverCluster runs raft.RecoverCluster, turning the state machine's panic on an entry of a
// newer version into an error: recover with the version the node ran.
func recoverCluster(rc *raft.Config, machine *fsm.FSM, store logStore, snaps raft.SnapshotStore,
	trans raft.Transport, conf raft.Configuration) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	return raft.RecoverCluster(rc, machine, store, store, snaps, trans, conf)
}
