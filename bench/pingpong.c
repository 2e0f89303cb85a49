// Paced ping-pong for the collector's throughput benchmark (issue 17):
// two processes pinned to ONE CPU hand a byte back and forth over pipes,
// each spinning a fixed number of loop iterations per message, so every
// hand-over is a context switch on that CPU with no idle wake-up in it
// (on a VM an idle vCPU's wake-up costs more than the switch itself and
// made the flat-out `perf bench sched pipe` faster on a busy machine).
//   pingpong CPU WARMUP_S SECS ITERS
// prints "pids PARENT CHILD" at once, waits WARMUP_S (collectors attach),
// then counts round trips for SECS and prints "round_trips_per_s N".
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void spin(long iters) {
	for (volatile long i = 0; i < iters; i++)
		;
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	if (argc != 5) {
		fprintf(stderr, "usage: pingpong CPU WARMUP_S SECS ITERS\n");
		return 2;
	}
	int cpu = atoi(argv[1]);
	double warm = atof(argv[2]), secs = atof(argv[3]);
	long iters = atol(argv[4]);
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set)) {
		perror("sched_setaffinity");
		return 1;
	}
	int a[2], b[2];
	if (pipe(a) || pipe(b)) {
		perror("pipe");
		return 1;
	}
	char c = 0;
	pid_t child = fork();
	if (child == 0) {
		for (;;) {
			if (read(a[0], &c, 1) != 1)
				_exit(0);
			spin(iters);
			if (write(b[1], &c, 1) != 1)
				_exit(0);
		}
	}
	printf("pids %d %d\n", getpid(), child);
	fflush(stdout);
	long n = 0;
	double t0 = now(), start = 0;
	for (;;) {
		double t = now();
		if (start == 0 && t - t0 >= warm) {
			start = t;
			n = 0;
		}
		if (start != 0 && t - start >= secs)
			break;
		spin(iters);
		if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1)
			break;
		n++;
	}
	double el = now() - start;
	kill(child, SIGKILL);
	printf("round_trips_per_s %.1f\n", n / el);
	return 0;
}
