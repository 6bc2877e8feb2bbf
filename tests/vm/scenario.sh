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

step_vm_kprobes
step_rprof_binary
step_open_count
step_glob
step_stale_cleanup
step_record_kernel
step_kernel_args
step_event_probes
echo "RPROF-VM-STEPS$STEPS"
