# biosnoop: each block I/O with its latency (bcc's biosnoop), from the block layer's own accounting events
# (block_io_start/done, what bcc reads on kernels that have them), paired by device and sector.
name: biosnoop
about: each block I/O: process, disk, direction, sector, bytes, latency
columns: TIME(s) COMM PID DISK T SECTOR BYTES LAT(ms)
common: -d -T
args: --pair t:block:block_io_start(comm,rwbs,bytes),t:block:block_io_done --key dev,sector
trace: {time:<11.6|TIME(s)} {comm:<14} {ctx.pid:>7|PID} {dev:<14|DISK} {rwbs:<3|T} {sector:>10} {bytes:>7} {dur_ms:>8.3|LAT(ms)}
cannot: PID is the task that started the I/O (a kworker for writeback), COMM the block layer's name for it
