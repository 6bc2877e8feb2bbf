# tcpretrans: TCP retransmits (bcc's tcpretrans), on tcp:tcp_retransmit_skb.
name: tcpretrans
about: TCP retransmits: addresses, ports and the socket's state
columns: TIME PID IP LADDR:LPORT T> RADDR:RPORT STATE
common: -d -T
probe: t:tcp:tcp_retransmit_skb(family, saddr_v6, daddr_v6, sport, dport, state)
trace: {time:<10.3|TIME(s)} {ctx.pid:>7|PID} {family:<8|IP} {saddr_v6:>26|LADDR}:{sport:<5|LPORT} R> {daddr_v6:>26|RADDR}:{dport:<5|RPORT} {state|STATE}
cannot: PID is empty for retransmits from the timer (a softirq), as bcc's is 0
cannot: LADDR and RADDR are the event's IPv6 fields: an IPv4 connection shows as ::ffff:a.b.c.d
