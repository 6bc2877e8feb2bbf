# runqlat: run queue latency (bcc's runqlat): from the moment a task can run (woken, new, or switched out still
# runnable: R, or preempted: R+) to the moment it runs, paired by thread id across CPUs. The idle task (pid 0)
# is left out, as bcc does.
name: runqlat
about: run queue latency: from wakeup (or preemption) to running, as a histogram
columns: a log2 histogram in usecs (-m msecs); -L one per thread
common: -d -T interval
args: --pair 't:sched:sched_wakeup | t:sched:sched_wakeup_new | t:sched:sched_switch if prev_pid != 0 && (prev_state == R || prev_state == "R+"), t:sched:sched_switch if next_pid != 0' --key 'pid|prev_pid=next_pid' --hist --hist-unit us --hist-only
cannot: histograms per process (bcc's -P) and -p PID: the sched tracepoints name the thread, not its process; -L gives one histogram per thread
flag -m: millisecond histograms
  +args: --hist-unit ms
flag -L: one histogram per thread (TID)
  +args: --by done.next_pid
