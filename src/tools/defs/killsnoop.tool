# killsnoop: signals sent with kill(2) (bcc's killsnoop). The syscall's own `pid` is the target (TPID); the
# sender is the process context (ctx.pid).
name: killsnoop
about: signals sent with kill(2): sender, signal by name, target and result
columns: PID COMM SIG TPID RESULT
common: -p -d -T
probe: syscall:kill(pid, sig) ret
trace: {ctx.pid:>7|PID} {comm:<16} {sig:<9|SIG} {pid:>7|TPID} {ret|RESULT}
flag -x: only failed kills
  filter: ret < 0
flag -s SIGNAL: only this signal (its number)
  filter: sig == $SIGNAL
