package supervisor

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// Jobs: processes that outlive the call that started them (SPEC §15). A
// job belongs to the supervisor, not to a channel: a channel that ends
// leaves it running, and any channel (of any server replica, before or
// after a restart) may read, feed or kill it by its id, "j1", "j2", …
// (monotonic for the supervisor's lifetime; with a log directory, unique
// among every supervisor that logs there: claimLog).
//
// Each job request is a stream, like a command:
//
//	start   Job{start} → JobEnd{ID, PID}
//	output  Job{output} → JobData… → JobEnd{Offset, NextOffset, …}: the
//	        job's output from Offset (characters), at most maxJobRead
//	        bytes in frames of at most maxPayload; with WaitMS, once there
//	        is output past the start or the job ended. msgKill ends the
//	        wait (CANCELLED); the job is never affected.
//	input   Job{input} → JobEnd
//	kill    Job{kill} → JobEnd{Job}
//	list    Job{list} → JobEnd{Jobs}
//
// A command started with ExecMsg.YieldAfterMS that still runs then becomes
// a job: its exec stream ends with ExitMsg{Job, Running}.
//
// Offsets count characters: bytes that start a UTF-8 sequence (every byte
// that is not 0b10xxxxxx), so that an agent's offsets are those of the text
// it was shown.
const (
	msgJob     byte = 14 // c→s: a job request (JobRequest, JSON) as the stream
	msgJobData byte = 15 // s→c: output bytes of an output request
	msgJobEnd  byte = 16 // s→c: the answer (JobReply, JSON); the stream's last frame
)

// Job request operations (JobRequest.Op).
const (
	jobStart  = "start"
	jobOutput = "output"
	jobInput  = "input"
	jobKill   = "kill"
	jobList   = "list"
)

// Limits of jobs.
const (
	jobRing        = 1 << 20 // output kept in memory per job
	maxJobRead     = 1 << 20 // output bytes in one answer
	maxJobInput    = 64 << 10
	maxJobWait     = 60_000 // ms
	maxJobsRunning = 256    // whatever a request's MaxJobs says
	maxJobsEnded   = 64     // ended jobs kept (their state and ring)
	maxJobCommand  = 200    // bytes of JobInfo.Command
	jobInputStall  = time.Second
)

// JobSettings are a job's limits, given when it starts (a start request,
// or an exec with YieldAfterMS).
type JobSettings struct {
	MaxJobs     int    `json:"max_jobs,omitempty"`      // refused when this many run; 0: maxJobsRunning
	LogPath     string `json:"log_path,omitempty"`      // the output also goes here, a new file; "": nowhere
	LogDir      string `json:"log_dir,omitempty"`       // without LogPath: LogDir/<id>.log, the id the first whose log is new there
	LogMaxBytes int64  `json:"log_max_bytes,omitempty"` // then one truncation line; 0: no limit
	// The bound of the thread's saved results, LogDir's parent and the
	// logs in LogDir (sandbox.SavedDir), kept when the job starts and
	// ends: the oldest saved outputs and ended jobs' logs go first
	// (pruneSaved); 0: no limit.
	SavedMaxFiles int   `json:"saved_max_files,omitempty"`
	SavedMaxBytes int64 `json:"saved_max_bytes,omitempty"`
}

// JobRequest is one job request.
type JobRequest struct {
	Op string `json:"op"`
	ID string `json:"id,omitempty"`
	// start
	Argv  []string `json:"argv,omitempty"`
	Dir   string   `json:"dir,omitempty"`
	Stdin bool     `json:"stdin,omitempty"` // a pipe for input; else /dev/null
	Shell bool     `json:"shell,omitempty"` // it starts in the kept shell state (ExecMsg.Shell) and changes none
	JobSettings
	// output: Offset nil is the job's shown cursor (what no reader was
	// shown yet; the read advances it).
	Offset *int64 `json:"offset,omitempty"`
	WaitMS int64  `json:"wait_ms,omitempty"`
	// input
	Data  []byte `json:"data,omitempty"`
	Close bool   `json:"close,omitempty"`
	// kill: TERM, INT or KILL
	Signal string `json:"signal,omitempty"`
}

// JobReply answers a job request. Err is one of the job codes; Msg says
// more.
type JobReply struct {
	Err     string `json:"err,omitempty"`
	Msg     string `json:"msg,omitempty"`
	Running int    `json:"running,omitempty"` // LIMIT: jobs running
	Max     int    `json:"max,omitempty"`     // LIMIT: the limit

	ID  string `json:"id,omitempty"`  // start
	PID int    `json:"pid,omitempty"` // start

	Job *JobInfo `json:"job,omitempty"` // output, input, kill

	Offset     int64 `json:"offset,omitempty"`      // output: where the data starts
	NextOffset int64 `json:"next_offset,omitempty"` // output: where it ends
	Dropped    int64 `json:"dropped,omitempty"`     // output: characters asked for that are no longer kept

	Jobs []JobInfo `json:"jobs,omitempty"` // list
}

// JobInfo is a job's state.
type JobInfo struct {
	ID        string `json:"id"`
	Command   string `json:"command"` // the first maxJobCommand bytes of the command
	State     string `json:"state"`   // JobRunning, JobExited or JobKilled
	PID       int    `json:"pid"`
	StartedAt int64  `json:"started_at"`         // unix ms
	EndedAt   int64  `json:"ended_at,omitempty"` // unix ms
	Code      int    `json:"code"`               // 128+N when ended by signal N
	Signal    string `json:"signal,omitempty"`   // the signal that ended it: TERM, KILL, …
}

// Job states.
const (
	JobRunning = "running"
	JobExited  = "exited"
	JobKilled  = "killed" // ended by a signal
)

// Codes of JobReply.Err.
const (
	codeNoJob   = "NOJOB"   // no job of that id
	codeLimit   = "LIMIT"   // MaxJobs run already
	codeInval   = "INVAL"   // a malformed request
	codeStart   = "START"   // the command could not start
	codeLog     = "LOG"     // the log file could not be made
	codeNoStdin = "NOSTDIN" // the job has no stdin pipe, or it was closed
	codeBlocked = "BLOCKED" // the job did not read its input
	codeEnded   = "ENDED"   // input to a job that ended
)

// jobID is the id of the n-th job.
func jobID(n uint64) string { return "j" + strconv.FormatUint(n, 10) }

// validJobID reports whether id is "j" and a positive decimal number
// without leading zeros.
func validJobID(id string) bool {
	if len(id) < 2 || len(id) > 20 || id[0] != 'j' || id[1] == '0' {
		return false
	}
	for _, c := range id[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validSignalName: what JobInfo.Signal may hold.
func validSignalName(s string) bool {
	if len(s) > 16 {
		return false
	}
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// runeStarts counts the characters of p: its bytes that are not UTF-8
// continuation bytes.
func runeStarts(p []byte) int64 {
	var n int64
	for _, b := range p {
		if b&0xC0 != 0x80 {
			n++
		}
	}
	return n
}

// completeLen is len(p) without a UTF-8 sequence cut short at its end (the
// rest of which has not been written yet).
func completeLen(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		b := p[i]
		if b&0xC0 == 0x80 {
			continue
		}
		need := 1
		switch {
		case b&0xE0 == 0xC0:
			need = 2
		case b&0xF0 == 0xE0:
			need = 3
		case b&0xF8 == 0xF0:
			need = 4
		}
		if len(p)-i < need {
			return i
		}
		return len(p)
	}
	return len(p)
}
