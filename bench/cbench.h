/* What the C benchmark programs share (bench/cring.c, bench/ring-c.c):
 * pinning to a CPU, a monotonic clock, and a positive number from the
 * command line. `program` names the program in messages. */
#ifndef NUMALAB_CBENCH_H
#define NUMALAB_CBENCH_H

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void pin(const char *program, int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        fprintf(stderr, "%s: sched_setaffinity: cannot run on CPU %d\n", program, cpu);
        exit(1);
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static unsigned long number(const char *program, const char *text, const char *what) {
    char *end;
    unsigned long value = strtoul(text, &end, 10);
    if (*text == '\0' || *end != '\0' || value == 0) {
        fprintf(stderr, "%s: %s must be a positive whole number, not \"%s\"\n", program, what, text);
        exit(2);
    }
    return value;
}

#endif
