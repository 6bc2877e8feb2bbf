# tcpaccept: passive TCP connections (bcc's tcpaccept), at the socket's move from SYN_RECV to ESTABLISHED.
name: tcpaccept
about: TCP connections accepted (the handshake's end), with addresses and ports
columns: PID COMM IP RADDR RPORT LADDR LPORT
common: -d -T
probe: t:sock:inet_sock_set_state(family, saddr_v6, daddr_v6, sport, dport) if newstate == TCP_ESTABLISHED && oldstate == TCP_SYN_RECV && protocol == IPPROTO_TCP
trace: {ctx.pid:>7|PID} {ctx.comm:<16|COMM} {family:<8|IP} {daddr_v6:<26|RADDR} {dport:>5|RPORT} {saddr_v6:<26|LADDR} {sport:>5|LPORT}
cannot: PID and COMM are empty: the handshake ends in a softirq, and accept(2) (in the process) gives no addresses without kprobes
cannot: RADDR and LADDR are the event's IPv6 fields: an IPv4 connection shows as ::ffff:a.b.c.d
flag -P PORT: only on these local ports (comma-separated)
  filter: sport == $PORT
