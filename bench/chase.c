/*
 * A minimal pointer chase: the reference numalab's idle-latency figure is
 * checked against (bench/matrix-quality.sh).
 *
 *   chase SIZE_BYTES [thp|4k] [CPU] [REPEATS] [SAMPLE_MS]
 *
 * Lays one pointer per 64-byte line of SIZE_BYTES of anonymous memory,
 * linked in a random single cycle (Sattolo's algorithm), pinned on CPU,
 * and prints the median nanoseconds per dependent load of REPEATS samples
 * of about SAMPLE_MS each, after a warm-up lap. Memory comes from the
 * thread's node (first touch); transparent huge pages are asked for with
 * madvise, or refused, as numalab does.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define LINE 64
#define HUGE (2UL << 20)

static uint64_t state = 0x9e3779b97f4a7c15ULL;

/* wyrand, as numalab's Rng */
static uint64_t next_u64(void) {
    state += 0xa0761d6478bd642fULL;
    __uint128_t t = (__uint128_t)state * (state ^ 0xe7037ed1a0b428dbULL);
    return (uint64_t)(t >> 64) ^ (uint64_t)t;
}

static uint64_t below(uint64_t n) { return (uint64_t)(((__uint128_t)next_u64() * n) >> 64); }

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void **chase(void **p, uint64_t steps) {
    while (steps >= 8) {
        p = (void **)*p; p = (void **)*p; p = (void **)*p; p = (void **)*p;
        p = (void **)*p; p = (void **)*p; p = (void **)*p; p = (void **)*p;
        steps -= 8;
    }
    while (steps--) p = (void **)*p;
    return p;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: chase SIZE_BYTES [thp|4k] [CPU] [REPEATS] [SAMPLE_MS]\n");
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    int thp = argc < 3 || strcmp(argv[2], "4k") != 0;
    int cpu = argc > 3 ? atoi(argv[3]) : 0;
    int repeats = argc > 4 ? atoi(argv[4]) : 5;
    double sample_ms = argc > 5 ? atof(argv[5]) : 100.0;
    if (repeats < 1 || repeats > 1000) repeats = 5;

    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) { perror("sched_setaffinity"); return 1; }

    /* 2 MiB-aligned, so whole huge pages fit. */
    char *raw = mmap(NULL, size + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) { perror("mmap"); return 1; }
    char *buf = (char *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
    madvise(buf, size, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(buf, 0, size);

    size_t n = size / LINE;
    size_t *next = malloc(n * sizeof *next);
    if (!next) { perror("malloc"); return 1; }
    for (size_t i = 0; i < n; i++) next[i] = i;
    for (size_t i = n - 1; i > 0; i--) { /* Sattolo: j strictly below i */
        size_t j = below(i), t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
    for (size_t i = 0; i < n; i++) *(void **)(buf + i * LINE) = buf + next[i] * LINE;
    free(next);

    void **p = (void **)buf;
    double t0 = now_ns();
    p = chase(p, n); /* warm-up lap, timed to size the samples */
    double per_load = (now_ns() - t0) / n;
    uint64_t steps = per_load > 0 ? (uint64_t)(sample_ms * 1e6 / per_load) : n;
    if (steps < n) steps = n;

    double samples[1000];
    for (int r = 0; r < repeats; r++) {
        double t = now_ns();
        p = chase(p, steps);
        samples[r] = (now_ns() - t) / steps;
    }
    qsort(samples, repeats, sizeof samples[0], cmp);
    double median = repeats % 2 ? samples[repeats / 2]
                                : (samples[repeats / 2 - 1] + samples[repeats / 2]) / 2;
    printf("%.2f\n", median);
    return p == NULL; /* use p, so the chase cannot be removed */
}
