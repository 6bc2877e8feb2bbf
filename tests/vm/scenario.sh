#!/bin/sh
# The rprof kernel-probe scenario, run inside the test VM by /init (busybox sh, as root).
# Prints one line per step to the serial console:
#   RPROF-VM-RESULT name=STEP status=pass|fail secs=SECONDS detail=FREE TEXT TO END OF LINE
# and, for failed steps, rprof's stderr as `RPROF-VM-LOG name=STEP | ...` lines.
T=/sys/kernel/tracing
# Every dynamic event (kprobes, event probes) where the kernel lists them together, else the kprobes.
EVENTS=$T/dynamic_events
[ -e "$EVENTS" ] || EVENTS=$T/kprobe_events
K=500          # exact number of open() calls the opener makes
# Caps on each wait for rprof, in the guest's seconds: hang guards only. The guest's clock is the host's wall
# clock, so a loaded host stretches every step; the host bounds the VM by its CPU time and idleness instead
# (run.sh's qemu_watch, which stops a guest idle for 60 s, before any of these caps).
CAP=600
STEPS=""

now() { cut -d' ' -f1 /proc/uptime; }

# result NAME STATUS START DETAIL: print the machine-readable line for one step.
result() {
    secs=$(awk -v a="$3" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    echo "RPROF-VM-RESULT name=$1 status=$2 secs=$secs detail=$4"
    STEPS="$STEPS $1"
}

# log NAME FILE...: copy the first lines of rprof's stderr to the console, tagged with the step.
log() {
    name=$1
    shift
    for f in "$@"; do
        [ -s "$f" ] && head -n 20 "$f" | sed "s/^/RPROF-VM-LOG name=$name | /"
    done
}

# oneline FILE: the first 160 characters of FILE on one line (for details).
oneline() { tr '\n' ' ' < "$1" | cut -c1-160; }

# groups: the rprof_* tracefs groups that exist now, one per line. Lines are `p:GROUP/EVENT ...`, or
# `rMAXACTIVE:GROUP/EVENT ...` for return probes (the kernel adds the maxactive number).
groups() { sed -n 's/^[pr][0-9]*:\(rprof_[0-9]*\)\/.*/\1/p' "$T/kprobe_events" | sort -u; }

# wait_group PID SECS [ERR]: wait until rprof PID has written its probes (group rprof_PID) and, given its stderr
# file ERR, says its events are on ("Ctrl-C to end"), or it died.
wait_group() {
    i=0
    while [ "$i" -lt "$(($2 * 10))" ]; do
        if grep -q "^[epr][0-9]*:rprof_$1/" "$EVENTS"; then
            [ -z "$3" ] && return 0
            grep -q "Ctrl-C to end" "$3" 2>/dev/null && return 0
        fi
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# start_rprof OUT ERR ARGS...: run rprof in the background with a $CAP s watchdog; sets RPID and WPID.
start_rprof() {
    out=$1
    err=$2
    shift 2
    rprof "$@" > "$out" 2> "$err" &
    RPID=$!
    (sleep "$CAP"; kill -9 "$RPID" 2>/dev/null) &
    WPID=$!
}

# finish_rprof: wait for the background rprof, stop its watchdog; sets RC.
finish_rprof() {
    wait "$RPID"
    RC=$?
    kill "$WPID" 2>/dev/null
    wait "$WPID" 2>/dev/null
}

# The open path's entry function differs between kernels: take the first one this kernel has.
OPENFN=""
for f in do_sys_openat2 do_sys_open do_filp_open; do
    if grep -qE " [tT] $f\$" /proc/kallsyms; then
        OPENFN=$f
        break
    fi
done
echo "RPROF-VM-INFO open_function=$OPENFN cpus=$(grep -c ^processor /proc/cpuinfo)"

# Step 0: the VM itself supports kprobes and kretprobes through tracefs, without rprof.
# run_opener STEP OUT ERR COUNT ARGS...: rprof ARGS on an opener of /tmp/target COUNT times (-p PID), started once
# rprof's probes are on; sets RC. Returns 1 (after a fail line) when rprof never got its probes on.
run_opener() {
    step=$1
    out=$2
    err=$3
    count=$4
    shift 4
    t0=$(now)
    /opener /tmp/target "$count" &
    opid=$!
    start_rprof "$out" "$err" probe -p "$opid" -d "$CAP" "$@"
    if ! wait_group "$RPID" "$CAP" "$err"; then
        kill -9 "$opid"
        wait "$opid" 2>/dev/null
        finish_rprof
        log "$step" "$err"
        result "$step" fail "$t0" "rprof probe exited $RC before its probes were on: $(oneline "$err")"
        return 1
    fi
    sleep 1
    kill -USR1 "$opid"
    wait "$opid"
    finish_rprof
    return 0
}

# Step 5: kernel arguments by their BTF names (this 6.1 kernel takes only $argN: rprof maps the names) and a
# string argument: each of 20 opens shows its file name, its dfd and its return.
step_kernel_args() {
    t0=$(now)
    if [ "$OPENFN" != do_sys_openat2 ]; then
        result kernel_args fail "$t0" "this kernel has no do_sys_openat2 (open function: $OPENFN)"
        return
    fi
    run_opener kernel_args /tmp/s5.out /tmp/s5.err 20 --trace 'do_sys_openat2(filename:str, dfd) ret' || return
    n=$(grep -c 'do_sys_openat2(filename="/tmp/target", dfd=-100) = [0-9]' /tmp/s5.out)
    detail="rc=$RC lines=$n expected=20 first=$(grep -m1 do_sys_openat2 /tmp/s5.out | cut -c1-120)"
    if [ "$RC" -eq 0 ] && [ "$n" -eq 20 ]; then
        result kernel_args pass "$t0" "$detail"
    else
        log kernel_args /tmp/s5.err /tmp/s5.out
        result kernel_args fail "$t0" "$detail"
    fi
}

# Step 6: opensnoop through event probes: this kernel takes `e:` probes, so a syscall's path is read in the
# kernel (the header line says so), for each of 20 opens, with its return.
step_event_probes() {
    t0=$(now)
    run_opener event_probes /tmp/s6.out /tmp/s6.err 20 --trace 'syscall:openat(filename:str) ret' || return
    n=$(grep -c 'syscall:openat(filename="/tmp/target") = [0-9]' /tmp/s6.out)
    how=$(grep -c "read in the kernel by an event probe" /tmp/s6.err)
    detail="rc=$RC lines=$n expected=20 header_says_event_probe=$how"
    if [ "$RC" -eq 0 ] && [ "$n" -eq 20 ] && [ "$how" -ge 1 ]; then
        result event_probes pass "$t0" "$detail"
    else
        log event_probes /tmp/s6.err /tmp/s6.out
        result event_probes fail "$t0" "$detail"
    fi
}

step_vm_kprobes() {
    t0=$(now)
    if [ -z "$OPENFN" ]; then
        result vm_kprobes fail "$t0" "no open-path function (do_sys_openat2, do_sys_open, do_filp_open) in /proc/kallsyms"
        return
    fi
    echo > "$T/trace"
    if ! echo "p:rprof_selftest/open $OPENFN" >> "$T/kprobe_events" ||
        ! echo "r:rprof_selftest/open_ret $OPENFN" >> "$T/kprobe_events"; then
        result vm_kprobes fail "$t0" "writing p:/r: lines for $OPENFN to $T/kprobe_events failed"
        return
    fi
    echo 1 > "$T/events/rprof_selftest/enable"
    cat /proc/version > /dev/null
    cat /proc/cmdline > /dev/null
    echo 0 > "$T/events/rprof_selftest/enable"
    hits=$(grep -c ' open: ' "$T/trace")
    rets=$(grep -c ' open_ret: ' "$T/trace")
    echo > "$T/trace"
    echo "-:rprof_selftest/open" >> "$T/kprobe_events"
    echo "-:rprof_selftest/open_ret" >> "$T/kprobe_events"
    left=$(grep -c rprof_selftest "$T/kprobe_events")
    detail="function=$OPENFN entry_hits=$hits return_hits=$rets left_after_remove=$left"
    if [ "$hits" -gt 0 ] && [ "$rets" -gt 0 ] && [ "$left" -eq 0 ] && [ ! -d "$T/events/rprof_selftest" ]; then
        result vm_kprobes pass "$t0" "$detail"
    else
        result vm_kprobes fail "$t0" "$detail"
    fi
}

# The static rprof binary runs in the VM.
step_rprof_binary() {
    t0=$(now)
    if v=$(rprof --version 2>&1); then
        result rprof_binary pass "$t0" "$v"
    else
        result rprof_binary fail "$t0" "rprof --version failed: $v"
    fi
}

# Step 1: `rprof probe -p PID --csv` counts exactly the K opens of the opener, with durations. rprof ends when the
# opener exits: -d $CAP is only a cap, so a slow VM (TCG on a loaded host) still sees every open.
step_open_count() {
    t0=$(now)
    echo hello > /tmp/target
    /opener /tmp/target "$K" &
    opid=$!
    start_rprof /tmp/s1.csv /tmp/s1.err probe -p "$opid" -d "$CAP" --csv "$OPENFN"
    if ! wait_group "$RPID" "$CAP" /tmp/s1.err; then
        kill -9 "$opid"
        wait "$opid" 2>/dev/null
        finish_rprof
        log open_count /tmp/s1.err
        result open_count fail "$t0" "rprof probe exited $RC without creating group rprof_$RPID: $(oneline /tmp/s1.err)"
        return
    fi
    sleep 1
    kill -USR1 "$opid"
    wait "$opid"
    orc=$?
    finish_rprof
    header=$(head -n 1 /tmp/s1.csv)
    line=$(awk -F, -v fn="$OPENFN" '$1 == fn || $1 ~ ("[^A-Za-z0-9_]" fn "$")' /tmp/s1.csv | head -n 1)
    count=$(echo "$line" | cut -d, -f2)
    total=$(echo "$line" | cut -d, -f3)
    maxus=$(echo "$line" | cut -d, -f7)
    lost=$(echo "$line" | cut -d, -f8)
    detail="rc=$RC opener_rc=$orc expected=$K line=$line"
    why=""
    if [ "$RC" -ne 0 ]; then
        why="stderr=$(oneline /tmp/s1.err)"
    elif [ "$header" != "function,count,total_us,self_us,avg_us,min_us,max_us,timing_lost" ]; then
        why="bad_header=$header"
    elif [ "$count" != "$K" ]; then
        why="count=$count"
    elif [ "$lost" != "0" ]; then
        why="timing_lost=$lost"
    elif ! awk -v t="$total" -v m="$maxus" 'BEGIN { exit !(t > 0 && m > 0) }'; then
        why="durations_not_positive"
    fi
    if [ -z "$why" ]; then
        result open_count pass "$t0" "$detail"
    else
        log open_count /tmp/s1.err /tmp/s1.csv
        result open_count fail "$t0" "$detail $why"
    fi
}

# Step 2: a glob over kernel functions probes several of them at once.
step_glob() {
    t0=$(now)
    matches=$(grep -cE ' [tT] vfs_[A-Za-z0-9_]*$' /proc/kallsyms)
    /opener /tmp/target 50 &
    opid=$!
    start_rprof /tmp/s2.csv /tmp/s2.err probe -d 8 --csv 'vfs_*'
    if ! wait_group "$RPID" "$CAP" /tmp/s2.err; then
        kill -9 "$opid"
        wait "$opid" 2>/dev/null
        finish_rprof
        log glob /tmp/s2.err
        result glob fail "$t0" "rprof probe exited $RC without creating group rprof_$RPID: $(oneline /tmp/s2.err)"
        return
    fi
    sleep 1
    kill -USR1 "$opid"
    wait "$opid"
    finish_rprof
    rows=$(tail -n +2 /tmp/s2.csv | grep -c ,)
    hit=$(tail -n +2 /tmp/s2.csv | awk -F, '$2 > 0' | wc -l)
    names=$(tail -n +2 /tmp/s2.csv | awk -F, '$2 > 0 { print $1 }' | head -n 5 | tr '\n' ' ')
    detail="rc=$RC kallsyms_matches=$matches rows=$rows rows_with_hits=$hit first=$names"
    if [ "$RC" -eq 0 ] && [ "$rows" -gt 1 ] && [ "$hit" -gt 1 ]; then
        result glob pass "$t0" "$detail"
    else
        log glob /tmp/s2.err /tmp/s2.csv
        result glob fail "$t0" "$detail stderr=$(oneline /tmp/s2.err)"
    fi
}

# Step 3: probes left by a SIGKILLed rprof are removed by the next rprof, which also cleans up after itself.
# supervisor_of PID: the pid of rprof PID's probe supervisor (`rprof __probe-supervisor ...`), if any.
supervisor_of() {
    for d in /proc/[0-9]*; do
        case "$(cat "$d/cmdline" 2>/dev/null)" in
            *__probe-supervisor*)
                if [ "$(awk '{ print $4 }' "$d/stat" 2>/dev/null)" = "$1" ]; then
                    echo "${d#/proc/}"
                    return
                fi
                ;;
        esac
    done
}

# count_group PID: the probe lines of group rprof_PID.
count_group() { grep -c "^[pr][0-9]*:rprof_$1/" "$T/kprobe_events"; }

step_stale_cleanup() {
    t0=$(now)
    # A SIGKILLed rprof: its supervisor removes its probes within 2 s.
    start_rprof /dev/null /tmp/s3s.err probe -d "$CAP" "$OPENFN"
    killed=$RPID
    if ! wait_group "$killed" "$CAP"; then
        finish_rprof
        log stale_cleanup /tmp/s3s.err
        result stale_cleanup fail "$t0" "rprof probe exited $RC without creating group rprof_$killed: $(oneline /tmp/s3s.err)"
        return
    fi
    sup=$(supervisor_of "$killed")
    kill -9 "$killed"
    finish_rprof
    i=0
    while [ "$(count_group "$killed")" -gt 0 ] && [ "$i" -lt 20 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    supervised=$(count_group "$killed")
    # An rprof SIGKILLed with its supervisor: the next rprof removes its probes at start.
    start_rprof /dev/null /tmp/s3a.err probe -d "$CAP" "$OPENFN"
    dead=$RPID
    if ! wait_group "$dead" "$CAP"; then
        finish_rprof
        log stale_cleanup /tmp/s3a.err
        result stale_cleanup fail "$t0" "rprof probe exited $RC without creating group rprof_$dead: $(oneline /tmp/s3a.err)"
        return
    fi
    sleep 1
    sup2=$(supervisor_of "$dead")
    [ -n "$sup2" ] && kill -9 "$sup2"
    kill -9 "$dead"
    finish_rprof
    before=$(count_group "$dead")
    timeout "$CAP" rprof probe -d 1 "$OPENFN" > /dev/null 2> /tmp/s3b.err
    rc=$?
    after=$(count_group "$dead")
    others=$(groups | tr '\n' ' ')
    dir=absent
    [ -d "$T/events/rprof_$dead" ] && dir=present
    detail="supervisor=${sup:-none} left_2s_after_kill=$supervised dead=rprof_$dead probes_before=$before probes_after=$after fresh_rc=$rc groups_left=[$others] events_dir=$dir"
    if [ -n "$sup" ] && [ "$supervised" -eq 0 ] && [ "$before" -gt 0 ] && [ "$after" -eq 0 ] && [ "$rc" -eq 0 ] \
        && [ -z "$others" ] && [ "$dir" = absent ]; then
        result stale_cleanup pass "$t0" "$detail"
    else
        log stale_cleanup /tmp/s3s.err /tmp/s3b.err
        result stale_cleanup fail "$t0" "$detail stderr=$(oneline /tmp/s3b.err)"
    fi
}

# Step 4: a system-wide recording with call graphs holds kernel frames, and `rprof report --folded` names them.
step_record_kernel() {
    t0=$(now)
    /burner "$CAP" &
    bpid=$!
    sleep 0.5
    timeout "$CAP" rprof record -a -g -d 1 -o /tmp/r.data > /tmp/s4.out 2> /tmp/s4.err
    rc=$?
    kill "$bpid"
    wait "$bpid" 2>/dev/null
    if [ "$rc" -ne 0 ]; then
        log record_kernel /tmp/s4.err
        result record_kernel fail "$t0" "rprof record exited $rc: $(oneline /tmp/s4.err)"
        return
    fi
    timeout "$CAP" rprof report -i /tmp/r.data --folded > /tmp/s4.folded 2> /tmp/s4r.err
    rc=$?
    lines=$(wc -l < /tmp/s4.folded)
    kernel='do_syscall_64|entry_SYSCALL_64|read_zero|ksys_read|vfs_read|__x64_sys_read'
    klines=$(grep -cE "$kernel" /tmp/s4.folded)
    burner=$(grep -c burner /tmp/s4.folded)
    sample=$(grep -E "$kernel" /tmp/s4.folded | sort -t' ' -k2 -n | tail -n 1 | cut -c1-200)
    detail="report_rc=$rc folded_lines=$lines kernel_lines=$klines burner_lines=$burner top_kernel=$sample"
    if [ "$rc" -eq 0 ] && [ "$klines" -gt 0 ]; then
        result record_kernel pass "$t0" "$detail"
    else
        log record_kernel /tmp/s4r.err
        result record_kernel fail "$t0" "$detail stderr=$(oneline /tmp/s4r.err)"
    fi
}

# ---- bpftrace's kprobe tools, run unchanged by `rprof bt` (Debian's bpftrace package's /usr/sbin/*.bt, copied to
# /bt by run.sh). Each is checked against what the workload is known to do.

# wait_text FILE TEXT: wait until FILE holds TEXT (a tool's BEGIN line: its probes are on) or rprof $RPID died.
wait_text() {
    i=0
    while [ "$i" -lt "$((CAP * 10))" ]; do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$RPID" 2>/dev/null || return 1
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# start_tool STEP NAME: `rprof bt /bt/NAME.bt` in the background (output /tmp/NAME.out, stderr /tmp/NAME.err),
# waiting for its BEGIN line. Returns 1 (after a fail line) when it never got there.
start_tool() {
    start_rprof "/tmp/$2.out" "/tmp/$2.err" bt "/bt/$2.bt"
    if ! wait_text "/tmp/$2.out" "$3"; then
        kill -9 "$RPID" 2>/dev/null
        finish_rprof
        log "$1" "/tmp/$2.err" "/tmp/$2.out"
        result "$1" fail "$t0" "rprof bt /bt/$2.bt exited $RC before its BEGIN line: $(oneline "/tmp/$2.err")"
        return 1
    fi
    return 0
}

# stop_tool: Ctrl-C to the tool, as a user ends it (it prints its maps then); sets RC.
stop_tool() {
    kill -INT "$RPID"
    finish_rprof
}

# The opener's COUNT opens, after a tool's probes are on.
opens() {
    /opener /tmp/target "$1" &
    opid=$!
    sleep 0.2
    kill -USR1 "$opid"
    wait "$opid"
}

# vfscount.bt (`kprobe:vfs_* { @[func] = count(); }`): vfs_open counted at least the opener's 100 opens (other
# processes, rprof among them, open files too).
step_bt_vfscount() {
    t0=$(now)
    start_tool bt_vfscount vfscount "Hit Ctrl-C to end" || return
    opens 100
    sleep 1
    stop_tool
    n=$(sed -n 's/^@\[vfs_open\]: \([0-9]*\)$/\1/p' /tmp/vfscount.out)
    keys=$(grep -c '^@\[vfs_' /tmp/vfscount.out)
    detail="rc=$RC vfs_open=${n:-none} expected_at_least=100 keys=$keys attaching=$(grep -m1 Attaching /tmp/vfscount.out)"
    if [ "$RC" -eq 0 ] && [ -n "$n" ] && [ "$n" -ge 100 ] && [ "$keys" -gt 1 ]; then
        result bt_vfscount pass "$t0" "$detail"
    else
        log bt_vfscount /tmp/vfscount.err /tmp/vfscount.out
        result bt_vfscount fail "$t0" "$detail"
    fi
}

# vfsstat.bt: per-second counts of vfs_read*/write*/fsync/open/create, time-stamped; the seconds' vfs_open counts
# add up to at least the opener's 100 opens (its END clears the last second's: it runs 2 s past the opens).
step_bt_vfsstat() {
    t0=$(now)
    start_tool bt_vfsstat vfsstat "Hit Ctrl-C to end" || return
    opens 100
    sleep 2.5
    stop_tool
    n=$(sed -n 's/^@\[vfs_open\]: \([0-9]*\)$/\1/p' /tmp/vfsstat.out | awk '{ s += $1 } END { print s + 0 }')
    stamps=$(grep -cE '^[0-9]{2}:[0-9]{2}:[0-9]{2}$' /tmp/vfsstat.out)
    detail="rc=$RC vfs_open_sum=$n expected_at_least=100 seconds_printed=$stamps"
    if [ "$RC" -eq 0 ] && [ "$n" -ge 100 ] && [ "$stamps" -ge 2 ]; then
        result bt_vfsstat pass "$t0" "$detail"
    else
        log bt_vfsstat /tmp/vfsstat.err /tmp/vfsstat.out
        result bt_vfsstat fail "$t0" "$detail"
    fi
}

# capable.bt: `mknod` of a character device asks for CAP_MKNOD (27): a line with mknod's pid, its comm, 27 and
# the name from the tool's own table.
step_bt_capable() {
    t0=$(now)
    start_tool bt_capable capable "Hit Ctrl-C to end" || return
    mknod /tmp/capnode c 1 3 &
    mpid=$!
    wait "$mpid"
    sleep 1
    stop_tool
    rm -f /tmp/capnode
    line=$(grep -E "^[0-9:]+ +0 +$mpid +mknod +27 +CAP_MKNOD +[0-9]+$" /tmp/capable.out | head -n 1)
    detail="rc=$RC mknod_pid=$mpid line=[$line] lines=$(grep -c CAP_ /tmp/capable.out)"
    if [ "$RC" -eq 0 ] && [ -n "$line" ]; then
        result bt_capable pass "$t0" "$detail"
    else
        log bt_capable /tmp/capable.err /tmp/capable.out
        result bt_capable fail "$t0" "$detail"
    fi
}

# A loop device over a file in /tmp (loop.ko from the kernel's package, put in by run.sh): block requests through
# blk-mq, counted by the kernel in /sys/block/loop0/stat.
LOOP_READY=""
loop_device() {
    [ -n "$LOOP_READY" ] && return 0
    insmod /lib/modules/loop.ko 2>/tmp/loop.err || grep -q '^loop ' /proc/modules || return 1
    i=0
    while [ ! -b /dev/loop0 ] && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    dd if=/dev/urandom of=/tmp/disk.img bs=1M count=16 2>/dev/null
    losetup /dev/loop0 /tmp/disk.img 2>>/tmp/loop.err || return 1
    LOOP_READY=1
}

# Requests the kernel completed on loop0 so far (reads + writes: fields 1 and 5 of its stat).
loop_ios() { awk '{ print $1 + $5 }' /sys/block/loop0/stat; }

# hist_total FILE: the counts of a bpftrace histogram's rows (`[a, b)   N |@@@|`), summed.
hist_total() { sed -n 's/^\[[^])]*[])] *\([0-9][0-9]*\) |.*$/\1/p' "$1" | awk '{ s += $1 } END { print s + 0 }'; }

# run_block_tool STEP NAME PROGRAM: `rprof bt PROGRAM` while 200 direct 4 KiB reads go to loop0 (NAME names its
# files); sets IOS (the requests the kernel completed meanwhile) and TOTAL (the histogram rows' counts).
run_block_tool() {
    cp "$3" "/bt/$2.bt" 2>/dev/null
    start_tool "$1" "$2" "Hit Ctrl-C to end" || return 1
    before=$(loop_ios)
    dd if=/dev/loop0 of=/dev/null bs=4k count=200 iflag=direct 2>/dev/null
    sleep 0.5
    IOS=$(($(loop_ios) - before))
    sleep 0.5
    stop_tool
    TOTAL=$(hist_total "/tmp/$2.out")
}

# On this 6.1 kernel the block accounting functions that biolatency.bt and biostacks.bt probe
# (`blk_account_io_start`/`_done` and their `__` forms) are all inlined: no kprobe can take them (bpftrace warns
# and attaches none; later bpftrace tools use the block_io_start/done tracepoints of 6.5+). So each tool runs
# unchanged (every such attach point skipped with bpftrace's warning, nothing measured, exit 0), and then as a
# copy whose attach points are functions this kernel has, at the same moments of a request (blk_mq_start_request
# when the driver takes it, blk_mq_end_request when it completes), checked against the kernel's own count.
BLOCK_FNS='s/kprobe:blk_account_io_start,/kprobe:blk_mq_start_request/; /kprobe:__blk_account_io_start/d; s/kprobe:blk_account_io_done,/kprobe:blk_mq_end_request/; /kprobe:__blk_account_io_done/d'

# biolatency.bt: one histogram whose counts add up to the requests loop0 completed (the kernel's own count).
step_bt_biolatency() {
    t0=$(now)
    if ! loop_device; then
        result bt_biolatency fail "$t0" "no loop device: $(oneline /tmp/loop.err)"
        return
    fi
    for f in blk_account_io_start __blk_account_io_start blk_account_io_done __blk_account_io_done; do
        grep -qx "$f" /sys/kernel/tracing/available_filter_functions && echo "RPROF-VM-INFO traceable=$f"
    done
    run_block_tool bt_biolatency biolatency /bt/biolatency.bt || return
    rc_asis=$RC total_asis=$TOTAL
    warn=$(grep -c 'WARNING: Unable to attach probe: kprobe:\(__\)\?blk_account_io_' /tmp/biolatency.err)
    sed "$BLOCK_FNS" /bt/biolatency.bt > /tmp/biolatency61.bt
    run_block_tool bt_biolatency biolatency61 /tmp/biolatency61.bt || return
    detail="unchanged: rc=$rc_asis skipped=$warn hist_total=$total_asis; with 6.1's functions: rc=$RC hist_total=$TOTAL loop0_requests=$IOS"
    if [ "$rc_asis" -eq 0 ] && [ "$warn" -eq 4 ] && [ "$total_asis" -eq 0 ] && [ "$RC" -eq 0 ] \
        && [ "$IOS" -ge 200 ] && [ "$TOTAL" -eq "$IOS" ] && grep -q '^@usecs:' /tmp/biolatency61.out; then
        result bt_biolatency pass "$t0" "$detail"
    else
        log bt_biolatency /tmp/biolatency.err /tmp/biolatency61.err /tmp/biolatency61.out
        result bt_biolatency fail "$t0" "$detail"
    fi
}

# biostacks.bt: request start to issue by the kernel stack that made the request. Unchanged, its start probes are
# skipped; with 6.1's functions (start: blk_mq_start_request, issue: blk_mq_end_request), the histograms' counts
# add up to the requests, under stacks that hold the loop driver's queue_rq.
step_bt_biostacks() {
    t0=$(now)
    if ! loop_device; then
        result bt_biostacks fail "$t0" "no loop device: $(oneline /tmp/loop.err)"
        return
    fi
    run_block_tool bt_biostacks biostacks /bt/biostacks.bt || return
    rc_asis=$RC total_asis=$TOTAL
    warn=$(grep -c 'WARNING: Unable to attach probe: kprobe:\(__\)\?blk_account_io_start' /tmp/biostacks.err)
    sed '/^kprobe:blk_mq_start_request$/d; s/kprobe:blk_account_io_start,/kprobe:blk_mq_start_request/; /kprobe:__blk_account_io_start/d; s/kprobe:blk_start_request,/kprobe:blk_mq_end_request/' \
        /bt/biostacks.bt > /tmp/biostacks61.bt
    run_block_tool bt_biostacks biostacks61 /tmp/biostacks61.bt || return
    stacks=$(grep -c '^@usecs\[$' /tmp/biostacks61.out)
    queue=$(grep -cE '^ +loop_queue_rq\+[0-9]+$' /tmp/biostacks61.out)
    detail="unchanged: rc=$rc_asis skipped=$warn hist_total=$total_asis; with 6.1's functions: rc=$RC hist_total=$TOTAL loop0_requests=$IOS stacks=$stacks loop_queue_rq_frames=$queue"
    if [ "$rc_asis" -eq 0 ] && [ "$warn" -eq 2 ] && [ "$total_asis" -eq 0 ] && [ "$RC" -eq 0 ] \
        && [ "$IOS" -ge 200 ] && [ "$TOTAL" -eq "$IOS" ] && [ "$stacks" -ge 1 ] && [ "$queue" -ge 1 ]; then
        result bt_biostacks pass "$t0" "$detail"
    else
        log bt_biostacks /tmp/biostacks.err /tmp/biostacks61.err /tmp/biostacks61.out
        result bt_biostacks fail "$t0" "$detail"
    fi
}

# A swap device on loop1 (over a file in /tmp; loop.ko as for loop0) and a memory cgroup for the pager, whose
# memory.reclaim puts its pages out (cgroup2, mounted here). zswap off, so that every swap-in reads the device.
SWAP_READY=""
swap_device() {
    [ -n "$SWAP_READY" ] && return 0
    insmod /lib/modules/loop.ko 2>/tmp/swap.err || grep -q '^loop ' /proc/modules || return 1
    i=0
    while [ ! -b /dev/loop1 ] && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    dd if=/dev/zero of=/tmp/swap.img bs=1M count=16 2>/dev/null
    losetup /dev/loop1 /tmp/swap.img 2>>/tmp/swap.err || return 1
    mkswap /dev/loop1 >/dev/null 2>>/tmp/swap.err || return 1
    swapon /dev/loop1 2>>/tmp/swap.err || return 1
    [ -w /sys/module/zswap/parameters/enabled ] && echo N > /sys/module/zswap/parameters/enabled
    mkdir -p /sys/fs/cgroup
    grep -q '^[^ ]* /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup 2>>/tmp/swap.err \
        || return 1
    echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2>>/tmp/swap.err || return 1
    mkdir -p /sys/fs/cgroup/pager 2>>/tmp/swap.err || return 1
    SWAP_READY=1
}

# Pages read in from swap so far (the kernel counts one per swap_readpage that reads a block device).
pswpin() { awk '$1 == "pswpin" { print $2 }' /proc/vmstat; }

# swapin.bt (`kprobe:swap_readpage { @[comm, pid] = count(); }`, printed and cleared each second), unchanged: the
# pager's 256 pages are put out to swap before the tool starts and read back while it runs; the pager's rows add up
# to the pages the kernel read in from swap meanwhile (pswpin), which are at least the 256.
step_bt_swapin() {
    t0=$(now)
    if ! swap_device; then
        result bt_swapin fail "$t0" "no swap device: $(oneline /tmp/swap.err)"
        return
    fi
    n=256
    sh -c "echo \$\$ > /sys/fs/cgroup/pager/cgroup.procs && exec /pager $n /sys/fs/cgroup/pager" \
        > /tmp/pager.out 2>&1 &
    gpid=$!
    i=0
    while ! grep -q '^paged out' /tmp/pager.out && kill -0 "$gpid" 2>/dev/null && [ "$i" -lt "$((CAP * 10))" ]; do
        sleep 0.1
        i=$((i + 1))
    done
    paged=$(sed -n 's/^paged out \([0-9]*\) of .*/\1/p' /tmp/pager.out)
    if [ -z "$paged" ]; then
        kill "$gpid" 2>/dev/null
        result bt_swapin fail "$t0" "the pager did not page out: $(oneline /tmp/pager.out)"
        return
    fi
    # bpftrace prints "Attaching 2 probes..." before it attaches them, as rprof does: the first print of the
    # interval probe (`time()`'s HH:MM:SS line) says that they are on.
    if ! start_tool bt_swapin swapin '^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]$'; then
        kill "$gpid" 2>/dev/null
        return
    fi
    before=$(pswpin)
    kill -USR1 "$gpid"
    wait "$gpid"
    sleep 0.5
    IN=$(($(pswpin) - before))
    cat "$T/kprobe_profile" > /tmp/swapin.profile 2>&1
    stop_tool
    counted=$(sed -n "s/^@\[pager, $gpid\]: \([0-9]*\)\$/\1/p" /tmp/swapin.out | awk '{ s += $1 } END { print s + 0 }')
    detail="rc=$RC paged_out=$paged of $n pswpin=$IN counted=$counted prints=$(grep -c '^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]$' /tmp/swapin.out)"
    if [ "$RC" -eq 0 ] && [ "$paged" -eq "$n" ] && [ "$IN" -ge "$n" ] && [ "$counted" -eq "$IN" ]; then
        result bt_swapin pass "$t0" "$detail"
    else
        log bt_swapin /tmp/swapin.err /tmp/pager.out
        od -c /tmp/swapin.out | head -n 40 | sed 's/^/RPROF-VM-LOG name=bt_swapin | out: /'
        sed 's/^/RPROF-VM-LOG name=bt_swapin | kprobe_profile: /' /tmp/swapin.profile
        result bt_swapin fail "$t0" "$detail"
    fi
}

# xfsdist.bt: XFS is a module this initramfs does not load, so each of its 8 kprobes is skipped with bpftrace's
# warning and the tool runs with none attached (as bpftrace does), ending cleanly on Ctrl-C.
step_bt_xfsdist() {
    t0=$(now)
    start_tool bt_xfsdist xfsdist "Hit Ctrl-C to end" || return
    sleep 1
    stop_tool
    warn=$(grep -c 'WARNING: Unable to attach probe: kretprobe:xfs_\|WARNING: Unable to attach probe: kprobe:xfs_' /tmp/xfsdist.err)
    detail="rc=$RC skipped=$warn expected=8"
    if [ "$RC" -eq 0 ] && [ "$warn" -eq 8 ]; then
        result bt_xfsdist pass "$t0" "$detail"
    else
        log bt_xfsdist /tmp/xfsdist.err /tmp/xfsdist.out
        result bt_xfsdist fail "$t0" "$detail"
    fi
}

step_vm_kprobes
step_rprof_binary
step_open_count
step_glob
step_stale_cleanup
step_record_kernel
step_kernel_args
step_event_probes
step_bt_vfscount
step_bt_vfsstat
step_bt_capable
step_bt_biolatency
step_bt_biostacks
step_bt_swapin
step_bt_xfsdist
echo "RPROF-VM-STEPS$STEPS"
