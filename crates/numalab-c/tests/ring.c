/* The C side of the ring's interoperation checks (scripts/c.sh): with
 * `numalab ring`'s Rust workers on the other side, the stream is
 * sequence-numbered 64-bit words, the format `ring-worker --verify`
 * writes and checks.
 *   ring NAME write BYTES   make ring NAME, wait for one reader, write
 *   ring NAME read BYTES    make ring NAME, join it, read and check all
 * Exits 0 when every byte went through as it should. */
#include <numalab.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t word(uint64_t i) { return (i * 0x9e3779b97f4a7c15ULL) ^ (i >> 29); }

#define CHECK(call)                                                           \
    do {                                                                      \
        numalab_status s_ = (call);                                           \
        if (s_ != NUMALAB_OK) {                                               \
            fprintf(stderr, "ring: %s: %d: %s\n", #call, (int)s_, numalab_last_error()); \
            return 1;                                                         \
        }                                                                     \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: ring NAME write|read BYTES\n");
        return 2;
    }
    const char *name = argv[1];
    uint64_t volume = strtoull(argv[3], NULL, 10);
    numalab_ring *ring;
    CHECK(numalab_ring_create(name, 4 * 65536, 65536, "local", &ring));
    uint64_t done = 0;
    if (strcmp(argv[2], "write") == 0) {
        numalab_writer *writer;
        CHECK(numalab_writer_attach(ring, &writer));
        CHECK(numalab_writer_set_timeout(writer, 60000));
        CHECK(numalab_writer_wait_for_readers(writer, 1, 60000));
        while (done < volume) {
            void *data;
            size_t capacity;
            CHECK(numalab_writer_acquire(writer, &data, &capacity));
            size_t n = volume - done < capacity ? (size_t)(volume - done) : capacity;
            uint64_t *w = data;
            for (size_t i = 0; i < n / 8; i++) w[i] = word(done / 8 + i);
            CHECK(numalab_writer_commit(writer, n, 0));
            done += n;
        }
        CHECK(numalab_writer_close(writer));
    } else {
        numalab_reader *reader;
        CHECK(numalab_reader_join(ring, &reader));
        CHECK(numalab_reader_set_timeout(reader, 60000));
        for (;;) {
            const void *data;
            size_t len;
            numalab_status s = numalab_reader_acquire(reader, &data, &len, NULL);
            if (s == NUMALAB_END) break;
            CHECK(s);
            const uint64_t *w = data;
            for (size_t i = 0; i < len / 8; i++) {
                if (w[i] != word(done / 8 + i)) {
                    fprintf(stderr, "ring: byte %llu of the stream is wrong\n",
                            (unsigned long long)(done + i * 8));
                    return 1;
                }
            }
            done += len;
            CHECK(numalab_reader_release(reader));
        }
        CHECK(numalab_reader_close(reader));
        if (done != volume) {
            fprintf(stderr, "ring: read %llu of %llu bytes\n", (unsigned long long)done,
                    (unsigned long long)volume);
            return 1;
        }
    }
    printf("ring: %s %llu bytes through %s\n", argv[2], (unsigned long long)done, name);
    CHECK(numalab_ring_close(ring));
    return 0;
}
