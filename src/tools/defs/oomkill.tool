# oomkill: the OOM killer's victims (bcc's oomkill), on oom:mark_victim, in the task whose allocation failed.
name: oomkill
about: OOM kills: who triggered it, who was killed, and its memory
columns: TIME, triggered by PID (COMM), killed PID (COMM), pages
common: -d
probe: t:oom:mark_victim(pid, comm, total_vm, anon_rss)
trace: {clock} Triggered by PID {ctx.pid} ("{ctx.comm}"), OOM kill of PID {pid} ("{comm}"), {total_vm} kB total-vm, {anon_rss} kB anon-rss
cannot: loadavg is not shown (read /proc/loadavg)
