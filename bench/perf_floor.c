/* The kernel's floor for reading probe events through perf (bench/placement_bench.sh): per-CPU perf events on
 * tracefs events, inherited by a launched command, with the sample fields asked for, drained by a reader that
 * only advances the rings' tails. No rprof: what any perf-events reader of these probes pays at least.
 *
 *   perf_floor SAMPLE_TYPE CLOCKID ID... -- CMD [ARGS]
 *
 * SAMPLE_TYPE: the perf_event_attr sample_type bits (0x486: TIME|RAW|TID|CPU, as rprof's perf engine asks); CLOCKID: the
 * clock of the samples' times (1: CLOCK_MONOTONIC, as rprof; -1: perf's default); ID: tracefs event ids
 * (events/GROUP/EVENT/id). Rings of 1024 pages, woken at a quarter full, as rprof's. Prints the bytes read to
 * stderr. */
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGES 1024
#define MAX_FDS 256

int main(int argc, char **argv) {
    int sep = 1;
    while (sep < argc && strcmp(argv[sep], "--")) sep++;
    if (argc < 5 || sep < 4 || sep + 1 >= argc) {
        fprintf(stderr, "usage: perf_floor SAMPLE_TYPE CLOCKID ID... -- CMD [ARGS]\n");
        return 2;
    }
    unsigned long long sample_type = strtoull(argv[1], 0, 0);
    int clock = atoi(argv[2]);
    int go[2];
    if (pipe(go)) return perror("pipe"), 1;
    pid_t pid = fork();
    if (pid == 0) { /* the command waits for its events to be enabled */
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1) _exit(126);
        execvp(argv[sep + 1], argv + sep + 1);
        _exit(127);
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int fds[MAX_FDS], n = 0;
    void *rings[MAX_FDS];
    size_t len = (PAGES + 1) * (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 3; i < sep; i++)
        for (long c = 0; c < cpus && n < MAX_FDS; c++) {
            struct perf_event_attr a;
            memset(&a, 0, sizeof a);
            a.size = sizeof a;
            a.type = PERF_TYPE_TRACEPOINT;
            a.config = strtoull(argv[i], 0, 0);
            a.sample_period = 1;
            a.sample_type = sample_type;
            a.inherit = 1;
            a.disabled = 1;
            a.watermark = 1;
            a.wakeup_watermark = PAGES * sysconf(_SC_PAGESIZE) / 4;
            if (clock >= 0) {
                a.use_clockid = 1;
                a.clockid = clock;
            }
            int fd = syscall(SYS_perf_event_open, &a, pid, (int)c, -1, 0);
            if (fd < 0) return perror("perf_event_open"), 1;
            rings[n] = mmap(0, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (rings[n] == MAP_FAILED) return perror("mmap"), 1;
            fds[n++] = fd;
        }
    for (int i = 0; i < n; i++) ioctl(fds[i], PERF_EVENT_IOC_ENABLE, 0);
    if (write(go[1], "x", 1) != 1) return perror("write"), 1;
    unsigned long long bytes = 0;
    int status = 0;
    for (;;) {
        struct pollfd p[MAX_FDS];
        for (int i = 0; i < n; i++) p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        poll(p, n, 100);
        for (int i = 0; i < n; i++) {
            struct perf_event_mmap_page *m = rings[i];
            unsigned long long head = __atomic_load_n(&m->data_head, __ATOMIC_ACQUIRE);
            bytes += head - m->data_tail;
            __atomic_store_n(&m->data_tail, head, __ATOMIC_RELEASE);
        }
        if (waitpid(pid, &status, WNOHANG) == pid) break;
    }
    fprintf(stderr, "perf_floor: %llu bytes read\n", bytes);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
