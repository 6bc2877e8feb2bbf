/* Burns CPU for SECS seconds, mostly inside the kernel: reads /dev/zero in 64 KiB chunks (read_zero, the
 * syscall entry path), with a little user-space work between reads so both kinds of frames show.
 * Usage: burner SECS */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char buf[65536];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static unsigned long user_spin(unsigned long x) {
    for (int i = 0; i < 20000; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3.0;
    int fd = open("/dev/zero", O_RDONLY);
    if (fd < 0) {
        perror("burner: open /dev/zero");
        return 1;
    }
    double end = now() + secs;
    unsigned long x = 1;
    while (now() < end) {
        if (read(fd, buf, sizeof buf) < 0) {
            perror("burner: read");
            return 1;
        }
        x = user_spin(x);
    }
    return (int)(x & 0);
}
