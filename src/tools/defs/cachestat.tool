# cachestat: page cache activity (bcc's cachestat, built on kprobes): here the page cache's tracepoints.
name: cachestat
about: page cache: pages added (misses) and folios dirtied, per interval
columns: HITS MISSES DIRTIES HITRATIO BUFFERS_MB CACHED_MB
common: -d -T interval
probe: t:filemap:mm_filemap_add_to_page_cache
probe: t:writeback:writeback_dirty_folio
args: --count
cannot: HITS and HITRATIO: a hit is a call of mark_page_accessed, a kprobe (none on this kernel); MISSES are pages added to the page cache, DIRTIES folios dirtied
cannot: BUFFERS_MB and CACHED_MB are in /proc/meminfo (Buffers, Cached)
