# execsnoop: new processes, one line per exec (bcc's execsnoop).
# The default reads sched:sched_process_exec, which fires once an exec has succeeded (the process already has
# its new name), joined to the same thread's start in ld.so, whose stack holds the argv (no event probes here
# to read the tracepoint's argv pointer). -x reads the execve syscall instead, failed ones too (its name is
# still the caller's there). PPID: the FORK record of the process, else /proc (bcc's fallback too).
name: execsnoop
about: new processes: one line per successful exec, with its parent and argv
columns: PCOMM PID PPID RET ARGS
common: -p -d -T
probe: t:sched:sched_process_exec(filename)
probe: /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2:_dl_start(arg0+8:str[8])
args: --trace-join sched:sched_process_exec,_dl_start
trace: {comm:<16|PCOMM} {pid:>7} {ppid:>7} {0:>3|RET} {arg0+8,filename|ARGS}
cannot: ARGS is the argv (up to 8 words) of dynamically linked programs, read as ld.so starts them; a static or Go program shows its path (the tracepoint's argv pointer needs an event probe), printed as it exits or 200 ms after its exec
flag -x: include failed execs (reads execve(2) and its result; PCOMM is then the caller's name)
  probe: syscall:execve(filename:str) ret
  args:
  trace: {comm:<16|PCOMM} {pid:>7} {ppid:>7} {ret:>3|RET} {filename|ARGS}
  cannot: with -x, ARGS is the path, read at libc's execve call site (no event probes here): execs of static and Go programs show no path
flag -n NAME: only commands whose name contains NAME
  filter: comm ~ "*$NAME*"
flag -a: each dynamically linked program's argc and whole argv (up to 8 words), read as ld.so starts it; static and Go programs are not shown
  probe: /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2:_dl_start(arg0->0:u64, arg0+8:str[8])
  args:
  trace: {comm:<16|PCOMM} {pid:>7} {arg0->0:>4|ARGC} {arg0+8|ARGS}
