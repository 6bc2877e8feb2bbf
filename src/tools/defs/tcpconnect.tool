# tcpconnect: active TCP connections (bcc's tcpconnect), at the socket's move to SYN_SENT: that happens in
# connect(2), so the process is the one connecting.
name: tcpconnect
about: TCP connections made (connect), with process, addresses and port
columns: PID COMM IP SADDR DADDR DPORT
common: -p -d -T
probe: t:sock:inet_sock_set_state(family, saddr, daddr, saddr_v6, daddr_v6, sport, dport) if newstate == TCP_SYN_SENT && protocol == IPPROTO_TCP
trace: {pid:>7} {comm:<16} {family:<8|IP} {saddr_v6:<26|SADDR} {daddr_v6:<26|DADDR} {dport:>5}
cannot: SADDR and DADDR are the event's IPv6 fields: an IPv4 connection shows as ::ffff:a.b.c.d
flag -P PORT: only to these destination ports (comma-separated)
  filter: dport == $PORT
