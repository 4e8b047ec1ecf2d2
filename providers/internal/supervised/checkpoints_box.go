package supervised

// boxCheckpoints asks the box's supervisor to run the checkpoint engine on
// the box's user-data (kubernetes). Not built yet: every method answers
// errNoCheckpoints.
func (s *Sandbox) boxCheckpoints() checkpointer { return noCheckpoints{} }
