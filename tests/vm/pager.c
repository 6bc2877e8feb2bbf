/* Puts PAGES pages of its own out to swap, waits for SIGUSR1, then reads them back (each one a swap-in) and exits.
 * The pages go out through the memory cgroup it runs in: CGROUP/memory.reclaim is asked for more than the group
 * holds until mincore(2) finds none of the pages resident (a page written out stays in the swap cache, resident,
 * until a later reclaim frees it; a read of such a page is no swap-in). Prints "paged out N of PAGES" (N: the pages
 * not resident) before it waits, and "read back" when done.
 * Usage: pager PAGES CGROUP */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static long resident(unsigned char *mem, long pages, long page) {
    unsigned char vec[pages];
    long n = 0;
    if (mincore(mem, pages * page, vec) != 0) {
        perror("pager: mincore");
        exit(1);
    }
    for (long i = 0; i < pages; i++)
        n += vec[i] & 1;
    return n;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: pager PAGES CGROUP\n");
        return 2;
    }
    long pages = atol(argv[1]), page = sysconf(_SC_PAGESIZE);
    char reclaim[512];
    snprintf(reclaim, sizeof reclaim, "%s/memory.reclaim", argv[2]);
    sigset_t set;
    int sig;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    unsigned char *mem = mmap(NULL, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        perror("pager: mmap");
        return 1;
    }
    for (long i = 0; i < pages; i++)
        memset(mem + i * page, (int)(i % 251) + 1, page);
    long left = pages;
    for (int tries = 0; tries < 50 && left > 0; tries++) {
        FILE *f = fopen(reclaim, "w");
        if (!f) {
            perror("pager: memory.reclaim");
            return 1;
        }
        fprintf(f, "%ld\n", 4 * pages * page);
        fclose(f); /* EAGAIN when less was reclaimed than asked: expected, the group holds less */
        usleep(100 * 1000);
        left = resident(mem, pages, page);
    }
    printf("paged out %ld of %ld\n", pages - left, pages);
    fflush(stdout);
    sigwait(&set, &sig);
    unsigned long sum = 0;
    for (long i = 0; i < pages; i++)
        sum += mem[i * page];
    printf("read back %lu\n", sum);
    return 0;
}
