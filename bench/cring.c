/*
 * A minimal shared-memory ring: the reference numalab's ring is held to
 * beside PSRDada (crates/numalab/benches/ring.rs, bench/all.sh).
 *
 *   cring BLOCK_BYTES BLOCKS VOLUME_BYTES WRITER_CPU READER_CPU [ramp=BYTES] [handshake]
 *
 * Two processes (fork) share BLOCKS slots of BLOCK_BYTES and two counters.
 * The writer, pinned on WRITER_CPU, memcpy's each block in from a hot
 * source of at most 4 MiB (as PSRDada's dada_junkdb and numalab's
 * benchmark do) and publishes it with a release store; the reader, pinned
 * on READER_CPU, spins until a block is published, memcpy's it out into a
 * private block-sized buffer and frees the slot. The source and the
 * private buffer start on page boundaries, as the ring's slots do and as
 * numalab's ring benchmark and `numalab ring` lay out theirs: where the
 * two ends of a copy lie within their pages changes its speed on some CPUs
 * (docs/figures.md), and every ring compared gets the same. Both sides
 * spin (no futex, no syscall per block), and every buffer is written
 * before the clock starts, so no page fault is timed. Prints the reader's
 * MB/s (10^6 bytes per second) for VOLUME_BYTES, rounded down to whole
 * blocks.
 *
 * With `ramp=BYTES`, that many bytes (rounded up to whole blocks) move
 * first, untimed, as `numalab ring --ramp` does: the reader starts its
 * clock at the first block after them.
 *
 * With `handshake`, each side also does per block what a ring whose sides
 * may sleep must do so that neither misses the other's wake-up (numalab's
 * ring, docs/figures.md): after its store, a sequentially consistent
 * fence, then a load of the word the other side would raise before going
 * to sleep. Nobody sleeps here, so the words stay zero; the difference
 * to the plain ring is what the handshake costs.
 */
#define _GNU_SOURCE
#include "cbench.h"
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SOURCE_MAX (4UL << 20)

struct shared {
    _Alignas(64) _Atomic uint64_t written;
    _Alignas(64) _Atomic uint64_t read;
    _Alignas(64) _Atomic int ready;
    _Alignas(64) _Atomic uint32_t data_sleepers;
    _Alignas(64) _Atomic uint32_t space_sleepers;
    _Alignas(64) double mbps;
};

/* `len` bytes starting on a page boundary, or the program ends. */
static uint8_t *page_alloc(size_t len) {
    uint8_t *p = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
    if (!p) {
        perror("cring: aligned_alloc");
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    const char *usage =
        "usage: cring BLOCK_BYTES BLOCKS VOLUME_BYTES WRITER_CPU READER_CPU [ramp=BYTES] [handshake]\n";
    if (argc < 6 || argc > 8) {
        fputs(usage, stderr);
        return 2;
    }
    size_t block = number("cring", argv[1], "BLOCK_BYTES");
    size_t blocks = number("cring", argv[2], "BLOCKS");
    uint64_t count = number("cring", argv[3], "VOLUME_BYTES") / block;
    int writer_cpu = atoi(argv[4]), reader_cpu = atoi(argv[5]);
    int handshake = 0;
    uint64_t ramp = 0;
    for (int a = 6; a < argc; a++) {
        if (strcmp(argv[a], "handshake") == 0) {
            handshake = 1;
        } else if (strncmp(argv[a], "ramp=", 5) == 0) {
            uint64_t bytes = number("cring", argv[a] + 5, "ramp=BYTES");
            ramp = bytes / block + (bytes % block != 0);
        } else {
            fputs(usage, stderr);
            return 2;
        }
    }
    if (count == 0)
        count = 1;
    uint64_t total = ramp + count;

    struct shared *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    uint8_t *ring = mmap(NULL, block * blocks, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED || ring == MAP_FAILED) {
        perror("cring: mmap");
        return 1;
    }
    memset(ring, 0, block * blocks);

    pid_t reader = fork();
    if (reader < 0) {
        perror("cring: fork");
        return 1;
    }
    if (reader == 0) {
        pin("cring", reader_cpu);
        uint8_t *out = page_alloc(block);
        memset(out, 1, block);
        atomic_fetch_add(&shared->ready, 1);
        while (atomic_load(&shared->ready) < 2)
            ;
        double start = now();
        for (uint64_t i = 0; i < total; i++) {
            if (i == ramp)
                start = now();
            while (atomic_load_explicit(&shared->written, memory_order_acquire) <= i)
                ;
            memcpy(out, ring + (i % blocks) * block, block);
            __asm__ volatile("" : : "r"(out) : "memory");
            atomic_store_explicit(&shared->read, i + 1, memory_order_release);
            if (handshake) {
                atomic_thread_fence(memory_order_seq_cst);
                if (atomic_load_explicit(&shared->space_sleepers, memory_order_relaxed))
                    _exit(3);
            }
        }
        shared->mbps = (double)count * block / (now() - start) / 1e6;
        _exit(0);
    }

    pin("cring", writer_cpu);
    size_t source_len = block < SOURCE_MAX ? block : SOURCE_MAX;
    uint8_t *source = page_alloc(source_len);
    memset(source, 2, source_len);
    atomic_fetch_add(&shared->ready, 1);
    while (atomic_load(&shared->ready) < 2)
        ;
    for (uint64_t i = 0; i < total; i++) {
        while (i - atomic_load_explicit(&shared->read, memory_order_acquire) >= blocks)
            ;
        uint8_t *slot = ring + (i % blocks) * block;
        for (size_t done = 0; done < block; done += source_len)
            memcpy(slot + done, source, block - done < source_len ? block - done : source_len);
        atomic_store_explicit(&shared->written, i + 1, memory_order_release);
        if (handshake) {
            atomic_thread_fence(memory_order_seq_cst);
            if (atomic_load_explicit(&shared->data_sleepers, memory_order_relaxed))
                return 3;
        }
    }
    int status;
    if (waitpid(reader, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "cring: the reader failed\n");
        return 1;
    }
    printf("%.1f\n", shared->mbps);
    return 0;
}
