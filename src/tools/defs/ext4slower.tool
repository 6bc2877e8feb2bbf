# ext4slower: slow ext4 operations (bcc's ext4slower, built on kprobes): here fsync, the one ext4 operation
# with entry and exit tracepoints, timed per thread.
name: ext4slower
about: slow ext4 fsyncs (at least 10 ms, or the positional MIN_MS)
columns: TIME COMM PID T BYTES OFF_KB LAT(ms) FILENAME
common: -p -d
args: --pair t:ext4:ext4_sync_file_enter(ino),t:ext4:ext4_sync_file_exit --min-duration 10ms
trace: {clock:<9|TIME} {comm:<16} {pid:>7} S {dur_ms:>8.2|LAT(ms)} {ino|INODE}
cannot: reads, writes and opens (R, W, O): ext4 has no tracepoints around them (bcc uses kprobes); fsyncs only (S)
cannot: FILENAME: the inode number instead (the dentry's name needs a kernel pointer)
flag -m MIN_MS: trace fsyncs at least this long in ms (0: all)
  args: --pair t:ext4:ext4_sync_file_enter(ino),t:ext4:ext4_sync_file_exit --min-duration $MIN_MSms
