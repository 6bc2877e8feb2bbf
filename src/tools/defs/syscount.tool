# syscount: system calls counted (bcc's syscount), on the syscall tracepoints.
name: syscount
about: system calls counted per call (-L timed, -P per process)
columns: SYSCALL COUNT [TIME]; -P: PID COMM COUNT
common: -p -d -T interval
probe: syscall:*
args: --count
flag -L: time each call (entry to return): total, average, quantiles
  args:
flag -P: count per process (PID and COMM) instead of per call
  probe: t:raw_syscalls:sys_enter
  args: --count --by pid,comm
when -P -L:
  probe:
  args: --pair t:raw_syscalls:sys_enter,t:raw_syscalls:sys_exit --by pid,comm
