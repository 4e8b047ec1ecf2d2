package sandbox

// The process-group wrapper of the providers that run commands through an
// exec API (docker, kubernetes), which has no way to kill what it started.
// It starts the command in its own session and process group (setsid,
// where the image has it), records the group id where a second exec can
// find it, waits, then kills the group, so background children do not
// outlive the call; a timeout runs GroupKillCommand. With a keep list, it
// first unsets every other variable (an exec API that cannot set the
// environment, such as pods/exec, adds its own). It changes to the
// workspace, runs the command with bash where the image has bash, and
// sends stderr into stdout's stream, so the two keep the order they were
// written in. $1 is the call's token, $2 the keep list, $3 the command.
const groupWrapper = `exec 2>&1; t=$1; k=" $2 "; c=$3
if [ -n "$2" ]; then for v in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p'); do case "$k" in *" $v "*) ;; *) unset "$v" 2>/dev/null;; esac; done; fi
cd /mnt/user-data/workspace 2>/dev/null
if command -v bash >/dev/null 2>&1; then s=bash; else s=sh; fi
if command -v setsid >/dev/null 2>&1; then setsid "$s" -c "$c" </dev/null & else "$s" -c "$c" </dev/null & fi
p=$!
echo "$p" > "/tmp/.sandbox-mcp-$t.pid" 2>/dev/null
wait "$p" 2>/dev/null; r=$?
kill -9 -"$p" 2>/dev/null
rm -f "/tmp/.sandbox-mcp-$t.pid"
exit "$r"`

// groupKiller kills the process group a wrapper recorded.
const groupKiller = `p=$(cat "/tmp/.sandbox-mcp-$1.pid" 2>/dev/null) && kill -9 -"$p" "$p" 2>/dev/null; rm -f "/tmp/.sandbox-mcp-$1.pid"; true`

// GroupCommand is the argv that runs command through the wrapper, for the
// call named token, keeping only the variables named in keep (space
// separated; "" keeps every one).
func GroupCommand(token, keep, command string) []string {
	return []string{"sh", "-c", groupWrapper, "sandbox-mcp", token, keep, command}
}

// GroupKillCommand is the argv that kills the process group of the call
// named token.
func GroupKillCommand(token string) []string {
	return []string{"sh", "-c", groupKiller, "sandbox-mcp-kill", token}
}
