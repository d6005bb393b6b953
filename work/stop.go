package work

// LeaveError says how the last stop of Run went with the membership: nil
// when this instance left it (the other instances took its lanes at
// once), else why leaving failed (the server unreachable: the others take
// the lanes when this instance's lease expires). Read it after Run has
// returned.
func (w *Worker) LeaveError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leaveErr
}
