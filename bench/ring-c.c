/*
 * The same two processes as bench/cring.c, through numalab's ring from C
 * (libnumalab): what a C program gets from numalab.h, beside the minimal
 * C ring (bench/c.sh).
 *
 *   ring-c BLOCK_BYTES BLOCKS VOLUME_BYTES WRITER_CPU READER_CPU
 *
 * The writer, pinned on WRITER_CPU, acquires each block and memcpy's it in
 * from a hot source of at most 4 MiB, then commits it; the reader, pinned
 * on READER_CPU, acquires each block, memcpy's it out into a private
 * block-sized buffer and releases it. Every buffer is written before the
 * clock starts. Prints the reader's MB/s (10^6 bytes per second) from its
 * first block to the end of the stream.
 */
#define _GNU_SOURCE
#include <numalab.h>
#include "cbench.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SOURCE_MAX (4UL << 20)

#define CHECK(call)                                                             \
    do {                                                                        \
        numalab_status s_ = (call);                                             \
        if (s_ != NUMALAB_OK) {                                                 \
            fprintf(stderr, "ring-c: %s: %s\n", #call, numalab_last_error());   \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: ring-c BLOCK_BYTES BLOCKS VOLUME_BYTES WRITER_CPU READER_CPU\n");
        return 2;
    }
    size_t block = number("ring-c", argv[1], "BLOCK_BYTES");
    size_t blocks = number("ring-c", argv[2], "BLOCKS");
    uint64_t count = number("ring-c", argv[3], "VOLUME_BYTES") / block;
    int writer_cpu = atoi(argv[4]), reader_cpu = atoi(argv[5]);
    if (count == 0) count = 1;

    char name[64];
    snprintf(name, sizeof name, "bench-ring-c-%d", (int)getpid());
    numalab_ring *ring;
    CHECK(numalab_ring_create(name, block * blocks, block, "local", &ring));
    double *mbps = mmap(NULL, sizeof *mbps, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    pid_t child = fork();
    if (child < 0) {
        perror("ring-c: fork");
        return 1;
    }
    if (child == 0) {
        pin("ring-c", reader_cpu);
        numalab_ring *mine;
        numalab_reader *reader;
        CHECK(numalab_ring_open(name, &mine));
        CHECK(numalab_reader_join(mine, &reader));
        uint8_t *out = malloc(block);
        memset(out, 1, block);
        double start = 0;
        uint64_t bytes = 0;
        for (;;) {
            const void *data;
            size_t len;
            numalab_status s = numalab_reader_acquire(reader, &data, &len, NULL);
            if (s == NUMALAB_END) break;
            CHECK(s);
            if (start == 0) start = now();
            memcpy(out, data, len);
            __asm__ volatile("" : : "r"(out) : "memory");
            bytes += len;
            CHECK(numalab_reader_release(reader));
        }
        *mbps = (double)bytes / (now() - start) / 1e6;
        CHECK(numalab_reader_close(reader));
        CHECK(numalab_ring_close(mine));
        _exit(0);
    }

    pin("ring-c", writer_cpu);
    size_t source_len = block < SOURCE_MAX ? block : SOURCE_MAX;
    uint8_t *source = malloc(source_len);
    memset(source, 2, source_len);
    numalab_writer *writer;
    CHECK(numalab_writer_attach(ring, &writer));
    CHECK(numalab_writer_wait_for_readers(writer, 1, 60000));
    for (uint64_t i = 0; i < count; i++) {
        void *slot;
        size_t capacity;
        CHECK(numalab_writer_acquire(writer, &slot, &capacity));
        for (size_t done = 0; done < block; done += source_len)
            memcpy((uint8_t *)slot + done, source, block - done < source_len ? block - done : source_len);
        CHECK(numalab_writer_commit(writer, block, 0));
    }
    CHECK(numalab_writer_close(writer));
    int status;
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "ring-c: the reader failed\n");
        return 1;
    }
    CHECK(numalab_ring_close(ring));
    printf("%.1f\n", *mbps);
    return 0;
}
