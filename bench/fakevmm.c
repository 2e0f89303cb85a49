// A stand-in for a VMM with thousands of vCPU threads (issue 29's soak):
// run as "qemu-system-x86_64 -name NAME THREADS" it starts THREADS threads
// named "CPU n/KVM", each asleep for a random 1-4 s, then busy for about
// 5 us (10,000 threads: 4,000 wake-ups a second), over and over, so the scheduler collector watches every one of
// them and sees them switch in. Prints "ready" on stdout once every thread
// is named. Small stacks: 10,000 threads fit in 640 MiB of address space
// and a few MiB of memory.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_barrier_t named;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *vcpu(void *arg)
{
	uintptr_t n = (uintptr_t)arg;
	char name[16];
	snprintf(name, sizeof name, "CPU %lu/KVM", (unsigned long)n);
	pthread_setname_np(pthread_self(), name);
	pthread_barrier_wait(&named);
	uint64_t x = n * 0x9E3779B97F4A7C15u + 1;
	for (;;) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t ms = 1000 + x % 3000;
		struct timespec d = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
		nanosleep(&d, NULL);
		uint64_t end = now_ns() + 5000;
		while (now_ns() < end)
			;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4 || strcmp(argv[1], "-name") != 0) {
		fprintf(stderr, "usage: %s -name NAME THREADS\n", argv[0]);
		return 2;
	}
	long n = strtol(argv[3], NULL, 10);
	if (n < 1 || n > 100000) {
		fprintf(stderr, "%s: THREADS must be 1-100000, not %s\n", argv[0], argv[3]);
		return 2;
	}
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 64 * 1024);
	pthread_barrier_init(&named, NULL, (unsigned)n + 1);
	for (long i = 0; i < n; i++) {
		pthread_t t;
		if (pthread_create(&t, &a, vcpu, (void *)(uintptr_t)i) != 0) {
			fprintf(stderr, "%s: thread %ld: cannot create\n", argv[0], i);
			return 1;
		}
	}
	pthread_barrier_wait(&named);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
