# statsnoop: stat calls (bcc's statsnoop), on the stat family's syscall tracepoints.
name: statsnoop
about: stat calls: one line per stat, lstat, fstatat, statx and statfs, with the result
columns: PID COMM RET ERR PATH
common: -p -d -T
probe: syscall:newstat(filename:str) ret
probe: syscall:newlstat(filename:str) ret
probe: syscall:newfstatat(filename:str) ret
probe: syscall:statx(filename:str) ret
probe: syscall:statfs(pathname:str) ret
trace: {pid:>7} {comm:<16} {ret:>10|RET/ERR} {filename,pathname|PATH}
cannot: PATH is read at libc's call sites (no event probes here): stats of static and Go programs show no path
flag -x: only failed stats
  filter: ret < 0
