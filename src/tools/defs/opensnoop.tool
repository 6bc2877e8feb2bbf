# opensnoop: files opened (bcc's opensnoop), on the open/openat/openat2 syscall tracepoints.
name: opensnoop
about: files opened: one line per open, openat and openat2, with the fd or the error
columns: PID COMM FD ERR PATH
common: -p -d -T
probe: syscall:open(filename:str) ret
probe: syscall:openat(filename:str) ret
probe: syscall:openat2(filename:str) ret
trace: {pid:>7} {comm:<16} {ret:>10|FD/ERR} {filename|PATH}
cannot: PATH is read at libc's and ld.so's call sites (no event probes here): opens of static and Go programs show no path
flag -x: only failed opens
  filter: ret < 0
flag -n NAME: only commands whose name contains NAME
  filter: comm ~ "*$NAME*"
