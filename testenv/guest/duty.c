/* A duty-cycle load for testenv guests (issue 27): every vCPU busy for a
 * random stretch, idle for another, on a schedule fixed by a seed, and a
 * work counter that says how much got done.
 *
 * Parameters come from the kernel command line (start-vm.sh --cmdline):
 *   duty_seed=S        the schedule's seed (default 1)
 *   duty_busy=MIN-MAX  busy stretches, ms, uniform (default 500-4000)
 *   duty_idle=MIN-MAX  idle stretches, ms, uniform (default 500-4000)
 *   duty_s=N           how long the schedule runs, s (default 600)
 * One thread per online CPU, each pinned to its CPU, all on the one
 * schedule: the VM's demand comes and goes as a whole. The schedule is in
 * wall time from the start (a stretch ends when its time is up, however
 * much work it did), so scripts/bench-duty.py can rebuild it exactly from
 * the seed: splitmix64, stretch = MIN + next() % (MAX - MIN + 1), busy
 * first.
 *
 * Prints "DUTY-START threads=N seed=S" when the schedule starts, then once
 * a second "DUTY <ms since start> <units of thread 0> <units of thread 1>
 * ...": cumulative work units, each a fixed run of arithmetic, so units
 * per second of busy time fall as the host steals the vCPU's time.
 * Static build: gcc -O2 -static -pthread duty.c -o duty.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define UNIT_ITERS 20000

static uint64_t seed = 1, busy_min = 500, busy_max = 4000, idle_min = 500, idle_max = 4000;
static uint64_t run_s = 600;
static volatile uint64_t units[MAX_THREADS];
static uint64_t t0_ns;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void range(const char *v, uint64_t *lo, uint64_t *hi) {
    char *end;
    uint64_t a = strtoull(v, &end, 10);
    if (*end == '-') {
        uint64_t b = strtoull(end + 1, NULL, 10);
        if (b >= a) {
            *lo = a;
            *hi = b;
        }
    }
}

static void read_cmdline(void) {
    char buf[4096] = {0};
    FILE *f = fopen("/proc/cmdline", "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    for (char *tok = strtok(buf, " \n"); tok; tok = strtok(NULL, " \n")) {
        if (!strncmp(tok, "duty_seed=", 10))
            seed = strtoull(tok + 10, NULL, 10);
        else if (!strncmp(tok, "duty_busy=", 10))
            range(tok + 10, &busy_min, &busy_max);
        else if (!strncmp(tok, "duty_idle=", 10))
            range(tok + 10, &idle_min, &idle_max);
        else if (!strncmp(tok, "duty_s=", 7))
            run_s = strtoull(tok + 7, NULL, 10);
    }
}

static void sleep_until(uint64_t t) {
    struct timespec ts = {.tv_sec = t / 1000000000ull, .tv_nsec = t % 1000000000ull};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
        ;
}

static void *worker(void *arg) {
    long cpu = (long)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
    uint64_t s = seed, at = t0_ns, end = t0_ns + run_s * 1000000000ull;
    volatile uint64_t x = (uint64_t)cpu;
    for (int busy = 1; at < end; busy = !busy) {
        uint64_t lo = busy ? busy_min : idle_min, hi = busy ? busy_max : idle_max;
        at += (lo + splitmix64(&s) % (hi - lo + 1)) * 1000000ull;
        if (!busy) {
            sleep_until(at);
            continue;
        }
        while (now_ns() < at) {
            for (int k = 0; k < UNIT_ITERS; k++)
                x = x * 6364136223846793005ull + 1442695040888963407ull;
            units[cpu]++;
        }
    }
    return NULL;
}

int main(void) {
    read_cmdline();
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > MAX_THREADS)
        n = MAX_THREADS;
    setvbuf(stdout, NULL, _IOLBF, 0);
    t0_ns = now_ns();
    printf("DUTY-START threads=%ld seed=%llu busy=%llu-%llu idle=%llu-%llu\n", n,
           (unsigned long long)seed, (unsigned long long)busy_min, (unsigned long long)busy_max,
           (unsigned long long)idle_min, (unsigned long long)idle_max);
    pthread_t th[MAX_THREADS];
    for (long i = 0; i < n; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
    for (uint64_t k = 1; k <= run_s; k++) {
        sleep_until(t0_ns + k * 1000000000ull);
        printf("DUTY %llu", (unsigned long long)((now_ns() - t0_ns) / 1000000ull));
        for (long i = 0; i < n; i++)
            printf(" %llu", (unsigned long long)units[i]);
        printf("\n");
    }
    for (long i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    return 0;
}
