/* Waits for SIGUSR1, then opens, reads one byte from and closes FILE exactly COUNT times, then exits.
 * Started before the probe attaches, so every open the probe sees from this pid is one of the COUNT.
 * Usage: opener FILE COUNT */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: opener FILE COUNT\n");
        return 2;
    }
    long count = atol(argv[2]);
    sigset_t set;
    int sig;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    sigwait(&set, &sig);
    for (long i = 0; i < count; i++) {
        char byte;
        int fd = open(argv[1], O_RDONLY);
        if (fd < 0) {
            perror("opener: open");
            return 1;
        }
        if (read(fd, &byte, 1) < 0) {
            perror("opener: read");
            return 1;
        }
        close(fd);
    }
    return 0;
}
