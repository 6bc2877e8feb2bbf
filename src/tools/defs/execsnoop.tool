# execsnoop: new processes, one line per exec (bcc's execsnoop).
# The default reads sched:sched_process_exec, which fires once an exec has succeeded: the process already has
# its new name. -x reads the execve syscall instead, failed ones too (its name is still the caller's there).
name: execsnoop
about: new processes: one line per successful exec, with the program run
columns: PCOMM PID RET ARGS
common: -p -d -T
probe: t:sched:sched_process_exec(filename)
trace: {comm:<16|PCOMM} {pid:>7} {filename|ARGS}
cannot: ARGS is the program's path (the tracepoint's argv pointer needs an event probe); -a gives the argv of dynamically linked programs
cannot: PPID is not shown: sched_process_exec has no parent's pid
flag -x: include failed execs (reads execve(2) and its result; PCOMM is then the caller's name)
  probe: syscall:execve(filename:str) ret
  trace: {comm:<16|PCOMM} {pid:>7} {ret:>3|RET} {filename|ARGS}
  cannot: with -x, ARGS is read at libc's execve call site (no event probes here): execs of static and Go programs show no path
flag -n NAME: only commands whose name contains NAME
  filter: comm ~ "*$NAME*"
flag -a: each dynamically linked program's whole argv (up to 8 words), read as ld.so starts it; static and Go programs are not shown
  probe: /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2:_dl_start(arg0->0:u64, arg0+8:str[8])
  trace: {comm:<16|PCOMM} {pid:>7} {arg0->0:>4|ARGC} {arg0+8|ARGS}
