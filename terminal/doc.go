// Package terminal is the server's side of terminal jobs (SPEC §20): the
// screen a program drew on a pseudo-terminal, rebuilt from the raw bytes
// it wrote (a terminal emulator, github.com/charmbracelet/x/vt) and shown
// as text with the cursor marked; the key names an agent types
// (<Enter>, <C-c>, <Up>, …) as the bytes a terminal sends; and a bounded
// cache of screens, so that a job's screen is fed only what it printed
// since it was last shown.
//
// The supervisor in the box keeps no screen: it owns the pseudo-terminal
// and keeps the job's output as any job's (the last MiB in memory, the
// whole in its log). A screen here is therefore rebuilt whenever the
// server has none — after a restart, on another replica, once evicted —
// from what the supervisor still keeps. A full-screen program redraws
// what it shows, so the rebuilt screen is the real one; a screen whose
// start was dropped (more than a MiB of output) may miss lines that were
// drawn before the kept bytes and never since.
package terminal
