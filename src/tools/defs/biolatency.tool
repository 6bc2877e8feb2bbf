# biolatency: block I/O latency from issue to completion as a log2 histogram (bcc's biolatency), paired by
# device and sector across CPUs.
name: biolatency
about: block I/O latency (issue to completion) as a histogram
columns: a log2 histogram in usecs (-m msecs); -D one per disk
common: -d -T interval
args: --pair t:block:block_rq_issue,t:block:block_rq_complete --key dev,sector --hist --hist-unit us --hist-only
flag -D: one histogram per disk
  +args: --by dev
flag -m: millisecond histograms
  +args: --hist-unit ms
flag -Q: include the time queued in the kernel (from insert, not issue)
  args: --pair t:block:block_rq_insert,t:block:block_rq_complete --key dev,sector --hist --hist-unit us --hist-only
