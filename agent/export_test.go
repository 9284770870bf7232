package agent

// Halt runs the hook the node calls when it must stop for good, with the exit status a lone
// agent would exit with: what a failed write to the Raft log or an entry only a newer version
// applies sets off, without a disk to break (see TestDevNodeThatMustStopStopsAlone).
func (a *Agent) Halt(status int, err error) { a.halter.on(status)(err) }
