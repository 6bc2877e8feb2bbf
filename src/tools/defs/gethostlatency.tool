# gethostlatency: name lookups through libc and their latency (bcc's gethostlatency), uprobes on libc's
# getaddrinfo, gethostbyname and gethostbyname2, each call timed from entry to return on its thread.
name: gethostlatency
about: host name lookups (getaddrinfo, gethostbyname) with their latency
columns: TIME PID COMM LATms HOST
common: -p -d
probe: c:getaddrinfo(arg0:str)
probe: c:gethostbyname(arg0:str)
probe: c:gethostbyname2(arg0:str)
trace: {clock:<9|TIME} {pid:>7} {comm:<16} {dur_ms:>10.2|LATms} {arg0|HOST}
cannot: only lookups through the libc that `c:` finds (not static, Go or musl programs)
