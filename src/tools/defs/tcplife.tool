# tcplife: TCP sessions (bcc's tcplife): each socket from connect (SYN_SENT) or accept (SYN_RECV) to CLOSE,
# paired by the socket's address on sock:inet_sock_set_state; the process is the opener's (empty for a socket
# born in softirq: the accepting side), the addresses and ports are those at CLOSE.
name: tcplife
about: TCP sessions: one line per closed connection with its process, addresses, ports and lifespan
columns: PID COMM LADDR LPORT RADDR RPORT MS
common: -d -T
args: --pair 't:sock:inet_sock_set_state if protocol == IPPROTO_TCP && (newstate == TCP_SYN_SENT || newstate == TCP_SYN_RECV), t:sock:inet_sock_set_state(family, saddr, sport, daddr, dport, saddr_v6, daddr_v6) if protocol == IPPROTO_TCP && newstate == TCP_CLOSE$AND_FILTERS' --key skaddr
trace: {pid:>7} {comm:<16} {saddr_v6:<26|LADDR} {sport:>5|LPORT} {daddr_v6:<26|RADDR} {dport:>5|RPORT} {dur_ms:>9.2|MS}
cannot: TX_KB and RX_KB: the bytes are in struct tcp_sock, read only by a kprobe (none on this kernel)
cannot: bcc's -p PID: the process is known at the START, the filters run at CLOSE
cannot: LADDR and RADDR are the event's IPv6 fields: an IPv4 connection shows as ::ffff:a.b.c.d
flag -L PORT: only sessions with these local ports (comma-separated)
  filter: sport == $PORT
flag -D PORT: only sessions with these remote ports (comma-separated)
  filter: dport == $PORT
