# bashreadline: commands typed into bash (bcc's bashreadline), the string readline returns.
name: bashreadline
about: commands typed into bash: the line readline returned
columns: TIME PID COMMAND
common: -p -d
probe: uretprobe:/bin/bash:readline(ret:str)
trace: {clock:<9|TIME} {pid:>7} {ret|COMMAND}
