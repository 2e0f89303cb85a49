/* The floor of `stealscope record --rate 100`: the same reads and nothing
 * else. Absolute 10 ms sleeps (clock_nanosleep TIMER_ABSTIME), a pread of a
 * kept-open /proc/stat each time and of /proc/interrupts once a second.
 * scripts/bench-record.sh builds and runs it beside `record`; its CPU is
 * the least any sampler with these reads can cost on the machine.
 *
 *   cc -O2 -o sample_floor scripts/sample_floor.c
 *   ./sample_floor SECONDS [HZ [IRQ_HZ]]
 *
 * Prints the CPU it used (getrusage) as a share of one CPU. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 16];

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 60.0;
    double hz = argc > 2 ? atof(argv[2]) : 100.0;
    double irq_hz = argc > 3 ? atof(argv[3]) : 1.0;
    int stat = open("/proc/stat", O_RDONLY);
    int irq = open("/proc/interrupts", O_RDONLY);
    if (stat < 0 || irq < 0 || hz <= 0) {
        perror("open /proc/stat, /proc/interrupts");
        return 1;
    }
    long period = (long)(1e9 / hz);
    long irq_every = irq_hz > 0 ? (long)(hz / irq_hz + 0.5) : 0;
    struct timespec start, next;
    clock_gettime(CLOCK_MONOTONIC, &start);
    next = start;
    long n = (long)(secs * hz), reads = 0;
    for (long i = 0; i < n; i++) {
        if (pread(stat, buf, sizeof buf, 0) > 0)
            reads++;
        if (irq_every && i % irq_every == 0)
            (void)pread(irq, buf, sizeof buf, 0);
        next.tv_nsec += period;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
                 (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    double wall = (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
    printf("%ld reads in %.1f s: %.4f CPU s, %.3f %% of one CPU\n", reads, wall, cpu,
           100.0 * cpu / wall);
    return 0;
}
