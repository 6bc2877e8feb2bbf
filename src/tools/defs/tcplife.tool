name: tcplife
about: TCP sessions: one line per closed connection with its ports, bytes and lifespan
columns: PID COMM LADDR LPORT RADDR RPORT TX_KB RX_KB MS
common: -p -d -T
todo: needs keyed state (START and DONE on the same inet_sock_set_state event told apart by filters, values taken at START printed at DONE), being built on branch `keyed`
