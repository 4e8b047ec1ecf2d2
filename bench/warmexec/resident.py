# A resident process in the box starting `bash -c true` as the supervisor does
# (vfork+exec via posix_spawn, its own process group, the command environment),
# N times after 20 warm-up runs; prints the median in microseconds.
import os, time, sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
pause = float(sys.argv[2]) / 1e3 if len(sys.argv) > 2 else 0
env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/mnt/user-data/workspace",
       "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp"}
os.chdir("/mnt/user-data/workspace")
ts = []
for i in range(n + 20):
    if pause: time.sleep(pause)
    s = time.perf_counter_ns()
    pid = os.posix_spawn("/usr/bin/bash", ["bash", "-c", "true"], env, setpgroup=0)
    os.waitpid(pid, 0)
    if i >= 20:
        ts.append((time.perf_counter_ns() - s) / 1e3)
ts.sort()
print('{"resident bash -c true": {"n": %d, "p50_us": %d, "p99_us": %d}}' % (n, ts[n // 2], ts[int(n * 0.99)]))
