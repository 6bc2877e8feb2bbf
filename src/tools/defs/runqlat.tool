name: runqlat
about: run queue latency: from wakeup (or preemption) to running, as a histogram
columns: usecs histogram
common: -p -d -T interval
todo: needs keyed state (several START events for one pair: sched_wakeup, sched_wakeup_new and a preempted sched_switch), being built on branch `keyed`; meanwhile: rprof probe --pair t:sched:sched_wakeup,t:sched:sched_switch --key pid=next_pid --hist
