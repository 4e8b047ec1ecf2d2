package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The facts a result carries as data (MCP structuredContent; SPEC §6: in
// structuredContent only, the text block saying the same for clients that
// read text). Each type is its tool's outputSchema too (mcp.WithOutputSchema
// reflects it), so the schema a client is given and what a handler returns
// are one declaration. A tool error carries none.

// bashFacts is bash's structured content.
type bashFacts struct {
	ExitCode  *int   `json:"exit_code,omitempty" jsonschema_description:"The command's exit code; absent when it timed out or goes on as a job."`
	TimedOut  bool   `json:"timed_out" jsonschema_description:"The timeout killed the command and every process it started."`
	Job       string `json:"job,omitempty" jsonschema_description:"The job the command runs as (run_in_background, or past yield_after): read it with bash_output."`
	State     string `json:"state,omitempty" jsonschema:"enum=running,enum=exited,enum=killed" jsonschema_description:"The job's state, when the command runs as a job."`
	Truncated bool   `json:"truncated" jsonschema_description:"The output shown was cut (its middle left out)."`
	Saved
}

// jobFacts is the structured content of bash_output, bash_input and
// bash_kill: one job's state, or (bash_output without job) every job's.
type jobFacts struct {
	Job        string `json:"job,omitempty" jsonschema_description:"The job read."`
	State      string `json:"state,omitempty" jsonschema:"enum=running,enum=exited,enum=killed" jsonschema_description:"running; exited (its exit code); or killed (by the signal)."`
	ExitCode   *int   `json:"exit_code,omitempty" jsonschema_description:"Its exit code, once it ended (128+N when signal N ended it)."`
	Signal     string `json:"signal,omitempty" jsonschema_description:"The signal that ended it (TERM, KILL, …)."`
	NextOffset *int64 `json:"next_offset,omitempty" jsonschema_description:"The offset of the output not read yet (bash_output's offset argument)."`
	Truncated  bool   `json:"truncated,omitempty" jsonschema_description:"The output shown was cut; the job's log keeps it whole."`
	Saved
	Jobs *[]jobEntry `json:"jobs,omitempty" jsonschema_description:"Every job of the thread (bash_output without job)."`
}

type jobEntry struct {
	Job      string `json:"job"`
	State    string `json:"state" jsonschema:"enum=running,enum=exited,enum=killed"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Command  string `json:"command" jsonschema_description:"The command's first 200 bytes."`
}

// globFacts is glob's structured content.
type globFacts struct {
	Paths      []string `json:"paths" jsonschema_description:"The virtual paths shown (this page)."`
	Total      int      `json:"total" jsonschema_description:"Paths found in all."`
	Offset     int      `json:"offset"`
	NextOffset *int     `json:"next_offset,omitempty" jsonschema_description:"The offset of the next page, when there is one."`
}

// grepFacts is grep's structured content: its counts.
type grepFacts struct {
	Matches    *int `json:"matches,omitempty" jsonschema_description:"Matching lines found; absent in output_mode files, which stops at a file's first match."`
	Files      int  `json:"files" jsonschema_description:"Files with a match."`
	Shown      int  `json:"shown" jsonschema_description:"Records shown (lines, files or counts, by output_mode)."`
	Complete   bool `json:"complete" jsonschema_description:"matches and files count every match; false when the search stopped once the page and the saved copy were full."`
	NextOffset *int `json:"next_offset,omitempty" jsonschema_description:"The offset of the next page, when there is one."`
	Saved
}

// Saved names where a cut output is kept whole: the file a result's
// notice names, as a virtual path and as the MCP resource of it.
type Saved struct {
	SavedTo  string `json:"saved_to,omitempty" jsonschema_description:"Where the whole output is, when the answer was cut: a virtual path (read it with read_file) under /mnt/user-data/outputs."`
	SavedURI string `json:"saved_uri,omitempty" jsonschema_description:"The same file as an MCP resource (resources/read)."`
}

func savedAt(path string) Saved {
	if path == "" {
		return Saved{}
	}
	return Saved{SavedTo: path, SavedURI: OutputsURI(path)}
}

// OutputsScheme is the URI prefix of the files under /mnt/user-data/outputs
// as MCP resources (SPEC §13).
const OutputsScheme = "sandbox://outputs/"

// OutputsURI is the resource URI of a virtual path under
// /mnt/user-data/outputs ("" for another).
func OutputsURI(name string) string {
	rel, ok := strings.CutPrefix(name, sandbox.OutputsDir+"/")
	if !ok || rel == "" {
		return ""
	}
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return OutputsScheme + strings.Join(parts, "/")
}

// EditedFile is write_file's structured content, and part of
// str_replace's: the file as the call left it, so that the next edit can
// pass its hash as expected_sha256 without reading it again.
type EditedFile struct {
	Path   string `json:"path"`
	Bytes  int    `json:"bytes" jsonschema_description:"The file's size after the call."`
	SHA256 string `json:"sha256" jsonschema_description:"The sha256 of the file after the call (hex)."`
}

func editedFile(name string, content []byte) EditedFile {
	sum := sha256.Sum256(content)
	return EditedFile{Path: name, Bytes: len(content), SHA256: hex.EncodeToString(sum[:])}
}

// replaceFacts is str_replace's structured content.
type replaceFacts struct {
	EditedFile
	Replacements int  `json:"replacements" jsonschema_description:"Occurrences replaced (a dry run: that would be)."`
	DryRun       bool `json:"dry_run,omitempty" jsonschema_description:"dry_run: nothing was written; sha256 is the file's as it is."`
}

// jobState is a job's state as its facts say it.
func jobState(j sandbox.JobInfo) (state string, code *int, signal string) {
	switch j.State {
	case sandbox.JobRunning:
		return "running", nil, ""
	case sandbox.JobKilled:
		if j.Signal != "" {
			c := j.Code
			return "killed", &c, j.Signal
		}
	}
	c := j.Code
	return "exited", &c, ""
}
