/* Every call of numalab.h, its error paths included, checked against the
 * kernel (/proc/self/numa_maps, sched_getaffinity) and not against
 * numalab's own answers. Built with AddressSanitizer and UBSan by
 * scripts/c.sh and run in the test command; exits non-zero on the first
 * check that fails, naming it. */
#define _GNU_SOURCE
#include <numalab.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

#define EXPECT(cond, ...)                                                    \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            failures++;                                                      \
        }                                                                    \
    } while (0)

#define IS(call, status)                                                         \
    do {                                                                         \
        numalab_status s_ = (call);                                              \
        EXPECT(s_ == (status), "%s gave %d (%s)", #call, (int)s_, numalab_last_error()); \
    } while (0)

/* The numa_maps line of the mapping at `addr`: its policy into `policy`
 * and its pages on `node`. */
static long numa_maps(void *addr, unsigned node, char *policy, size_t len) {
    FILE *f = fopen("/proc/self/numa_maps", "r");
    char line[4096], key[32];
    unsigned long best = 0;
    long pages = -1;
    snprintf(key, sizeof key, " N%u=", node);
    while (f && fgets(line, sizeof line, f)) {
        unsigned long start = strtoul(line, NULL, 16);
        if (start <= (unsigned long)addr && start >= best) {
            best = start;
            sscanf(line, "%*s %31s", policy);
            char *n = strstr(line, key);
            pages = n ? strtol(n + strlen(key), NULL, 10) : 0;
        }
    }
    if (f) fclose(f);
    (void)len;
    return pages;
}

int main(void) {
    unsigned count = 0, last = 0, distance = 0;
    IS(numalab_node_count(&count), NUMALAB_OK);
    EXPECT(count >= 1, "%u nodes", count);
    IS(numalab_node_id(count - 1, &last), NUMALAB_OK);
    IS(numalab_node_id(count, &last), NUMALAB_EINVAL);
    IS(numalab_node_count(NULL), NUMALAB_EINVAL);
    IS(numalab_distance(last, last, &distance), NUMALAB_OK);
    EXPECT(distance == 10, "distance %u", distance);
    IS(numalab_distance(0, 4000, &distance), NUMALAB_ENODE);
    uint64_t total = 0, free_now = 0;
    IS(numalab_node_memory(last, &total, &free_now), NUMALAB_OK);
    EXPECT(total > 0 && free_now <= total, "total %llu free %llu", (unsigned long long)total,
           (unsigned long long)free_now);
    IS(numalab_node_memory(4000, NULL, NULL), NUMALAB_ENODE);

    /* Placement, checked by numa_maps. */
    char policy[64], want[64], found[64] = "";
    snprintf(policy, sizeof policy, "bind:%u", last);
    size_t size = 8 << 20;
    void *buffer = NULL;
    IS(numalab_alloc(size, policy, 1, &buffer), NUMALAB_OK);
    long pages = numa_maps(buffer, last, found, sizeof found);
    EXPECT(strcmp(found, policy) == 0, "numa_maps policy %s", found);
    EXPECT(pages == (long)(size / 4096), "numa_maps N%u=%ld", last, pages);
    uint64_t counts[8] = {0}, absent = 99;
    IS(numalab_locate(buffer, size, counts, 8, &absent), NUMALAB_OK);
    EXPECT(counts[last] == (uint64_t)pages && absent == 0, "located %llu, %llu absent",
           (unsigned long long)counts[last], (unsigned long long)absent);
    int matched = -1;
    char note[16];
    IS(numalab_audit(buffer, size, policy, &matched, note, sizeof note), NUMALAB_OK);
    EXPECT(matched == 1 && strlen(note) == sizeof note - 1, "matched %d, note '%s'", matched, note);
    IS(numalab_place(buffer, size, "interleave:all", 1), NUMALAB_OK);
    numa_maps(buffer, last, found, sizeof found);
    EXPECT(strncmp(found, "interleave:", 11) == 0, "after place: %s", found);
    IS(numalab_free(buffer), NUMALAB_OK);
    IS(numalab_free(buffer), NUMALAB_EINVAL); /* freed already */
    IS(numalab_free(NULL), NUMALAB_OK);
    int local = 0;
    IS(numalab_free(&local), NUMALAB_EINVAL);

    /* Bad input: refused with a message, nothing allocated. */
    IS(numalab_alloc(size, "bind:x", 0, &buffer), NUMALAB_EPOLICY);
    EXPECT(buffer == NULL, "out set on error");
    EXPECT(strstr(numalab_last_error(), "\"x\"") != NULL, "message '%s'", numalab_last_error());
    IS(numalab_alloc(size, "spread", 0, &buffer), NUMALAB_EPOLICY);
    IS(numalab_alloc(size, "bind:4000", 0, &buffer), NUMALAB_ENODE);
    EXPECT(strstr(numalab_last_error(), "node 4000") != NULL, "message '%s'", numalab_last_error());
    IS(numalab_alloc((size_t)1 << 60, policy, 0, &buffer), NUMALAB_ENODE);
    IS(numalab_alloc(0, policy, 0, &buffer), NUMALAB_EINVAL);
    IS(numalab_alloc(size, NULL, 0, &buffer), NUMALAB_EINVAL);
    IS(numalab_alloc(size, policy, 0, NULL), NUMALAB_EINVAL);
    IS(numalab_alloc(size, "\xff", 0, &buffer), NUMALAB_EINVAL);
    IS(numalab_locate(&local, sizeof local, NULL, 4, NULL), NUMALAB_EINVAL);
    IS(numalab_locate(NULL, 4096, counts, 8, &absent), NUMALAB_OK); /* nothing mapped there */
    EXPECT(absent == 0 || absent == 1, "absent %llu", (unsigned long long)absent);
    IS(numalab_audit(&local, sizeof local, "local", NULL, NULL, 0), NUMALAB_EINVAL);
    IS(numalab_place(NULL, 4096, "local", 0), NUMALAB_EINVAL);
    IS(numalab_place(&local, sizeof local, "bind:x", 0), NUMALAB_EPOLICY);

    /* The thread's policy and CPUs, restored; checked by the kernel. */
    cpu_set_t before, during, after;
    sched_getaffinity(0, sizeof before, &before);
    numalab_thread_state *saved = NULL;
    IS(numalab_thread_bind(policy, "0", &saved), NUMALAB_OK);
    sched_getaffinity(0, sizeof during, &during);
    EXPECT(CPU_COUNT(&during) == 1 && CPU_ISSET(0, &during), "bound to %d CPUs", CPU_COUNT(&during));
    IS(numalab_thread_restore(saved), NUMALAB_OK);
    sched_getaffinity(0, sizeof after, &after);
    EXPECT(CPU_EQUAL(&before, &after), "CPUs not restored");
    IS(numalab_thread_bind("bind:x", NULL, &saved), NUMALAB_EPOLICY);
    IS(numalab_thread_bind(NULL, "4096", &saved), NUMALAB_ENODE);
    IS(numalab_thread_restore(NULL), NUMALAB_EINVAL);
    sched_getaffinity(0, sizeof after, &after);
    EXPECT(CPU_EQUAL(&before, &after), "a refused bind changed the CPUs");

    /* The ring: both sides in this process, every misuse refused. */
    char name[64];
    snprintf(name, sizeof name, "c-calls-%d", (int)getpid());
    numalab_ring *ring = NULL, *again = NULL;
    IS(numalab_ring_open(name, &ring), NUMALAB_ENOTFOUND);
    IS(numalab_ring_create(name, 4 * 4096, 4096, NULL, &ring), NUMALAB_OK);
    IS(numalab_ring_create(name, 4 * 4096, 4096, NULL, &again), NUMALAB_EEXIST);
    IS(numalab_ring_create("a/b", 4 * 4096, 4096, NULL, &again), NUMALAB_EINVAL);
    IS(numalab_ring_create("c-calls-x", 4096, 4096, NULL, &again), NUMALAB_EINVAL); /* one block */
    IS(numalab_ring_create("c-calls-x", 4 * 4096, 4096, "bind:x", &again), NUMALAB_EPOLICY);
    size_t block_size = 0, blocks = 0;
    IS(numalab_ring_geometry(ring, &block_size, &blocks), NUMALAB_OK);
    EXPECT(block_size == 4096 && blocks == 4, "geometry %zu x %zu", blocks, block_size);
    numalab_reader *reader = NULL;
    numalab_writer *writer = NULL, *second = NULL;
    IS(numalab_reader_join(ring, &reader), NUMALAB_OK);
    IS(numalab_writer_attach(ring, &writer), NUMALAB_OK);
    IS(numalab_writer_attach(ring, &second), NUMALAB_EOTHER); /* one writer at a time */
    IS(numalab_reader_set_timeout(reader, 50), NUMALAB_OK);
    const void *seen = NULL;
    size_t seen_len = 0;
    int flags = 0;
    IS(numalab_reader_acquire(reader, &seen, &seen_len, &flags), NUMALAB_ETIMEDOUT);
    IS(numalab_reader_release(reader), NUMALAB_ESTATE);
    IS(numalab_writer_commit(writer, 1, 0), NUMALAB_ESTATE);
    IS(numalab_writer_begin_transfer(writer, "SOURCE J0437-4715\nNCHAN 1024\n"), NUMALAB_OK);
    IS(numalab_writer_begin_transfer(writer, "TWO WORDS\nKEY line\rbreak\n"), NUMALAB_EINVAL);
    void *block = NULL;
    size_t capacity = 0;
    IS(numalab_writer_acquire(writer, &block, &capacity), NUMALAB_OK);
    EXPECT(capacity == 4096, "capacity %zu", capacity);
    IS(numalab_writer_acquire(writer, &block, &capacity), NUMALAB_ESTATE);
    IS(numalab_writer_write(writer, "x", 1), NUMALAB_ESTATE);
    memcpy(block, "hello", 5);
    IS(numalab_writer_commit(writer, 4097, 0), NUMALAB_EINVAL); /* past the block */
    IS(numalab_writer_commit(writer, 5, 1), NUMALAB_OK);
    IS(numalab_writer_commit(writer, 5, 1), NUMALAB_ESTATE);
    IS(numalab_reader_acquire(reader, &seen, &seen_len, &flags), NUMALAB_OK);
    EXPECT(seen_len == 5 && memcmp(seen, "hello", 5) == 0, "read %zu bytes", seen_len);
    EXPECT(flags == (NUMALAB_BLOCK_START | NUMALAB_BLOCK_END), "flags %d", flags);
    uint64_t transfer = 0;
    char head[64], tiny[4];
    IS(numalab_reader_transfer(reader, &transfer, head, sizeof head), NUMALAB_OK);
    EXPECT(transfer == 1 && strcmp(head, "SOURCE J0437-4715\nNCHAN 1024\n") == 0, "transfer %llu '%s'",
           (unsigned long long)transfer, head);
    IS(numalab_reader_transfer(reader, NULL, tiny, sizeof tiny), NUMALAB_EINVAL);
    IS(numalab_reader_release(reader), NUMALAB_OK);
    IS(numalab_reader_release(reader), NUMALAB_ESTATE); /* released twice */
    IS(numalab_writer_write(writer, "0123456789", 10), NUMALAB_OK);
    IS(numalab_writer_close(writer), NUMALAB_OK); /* the end of the stream */
    IS(numalab_reader_acquire(reader, &seen, &seen_len, &flags), NUMALAB_OK);
    EXPECT(seen_len == 10 && memcmp(seen, "0123456789", 10) == 0, "read %zu bytes", seen_len);
    IS(numalab_reader_acquire(reader, &seen, &seen_len, &flags), NUMALAB_END);
    IS(numalab_ring_close(ring), NUMALAB_OK); /* before its reader: allowed */
    IS(numalab_reader_close(reader), NUMALAB_OK);
    IS(numalab_ring_open(name, &ring), NUMALAB_ENOTFOUND); /* the name went with the ring */
    IS(numalab_ring_geometry(NULL, &block_size, NULL), NUMALAB_EINVAL);
    IS(numalab_reader_acquire(NULL, &seen, &seen_len, NULL), NUMALAB_EINVAL);
    IS(numalab_writer_close(NULL), NUMALAB_OK);

    /* The page cache, against util-linux fincore when it is here. */
    char file[] = "/tmp/numalab-c-calls-XXXXXX";
    int fd = mkstemp(file);
    EXPECT(fd >= 0, "mkstemp");
    static char data[1 << 20];
    memset(data, 7, sizeof data);
    EXPECT(write(fd, data, sizeof data) == (ssize_t)sizeof data, "write");
    close(fd);
    uint64_t cache_nodes[8] = {0}, cached = 0, spans = 0;
    IS(numalab_fincore(file, cache_nodes, 8, &cached, &spans), NUMALAB_OK);
    EXPECT(spans == (1 << 20) / 4096, "spans %llu pages", (unsigned long long)spans);
    uint64_t sum = 0;
    for (int i = 0; i < 8; i++) sum += cache_nodes[i];
    EXPECT(sum <= cached && cached <= spans, "cached %llu, on nodes %llu", (unsigned long long)cached,
           (unsigned long long)sum);
    char command[128];
    snprintf(command, sizeof command, "fincore --raw --noheadings --output PAGES %s 2>/dev/null", file);
    FILE *util = popen(command, "r");
    unsigned long long theirs = 0;
    if (util && fscanf(util, "%llu", &theirs) == 1) {
        EXPECT(theirs == cached, "util-linux fincore %llu, numalab %llu", theirs, (unsigned long long)cached);
    } else {
        printf("calls: util-linux fincore not run here; numalab_fincore checked on its own\n");
    }
    if (util) pclose(util);
    unlink(file);
    IS(numalab_fincore(file, cache_nodes, 8, &cached, NULL), NUMALAB_ENOTFOUND);
    IS(numalab_fincore("/dev/null", NULL, 0, NULL, NULL), NUMALAB_EINVAL);
    IS(numalab_fincore(NULL, NULL, 0, NULL, NULL), NUMALAB_EINVAL);
    IS(numalab_fincore("/etc/hostname", NULL, 4, NULL, NULL), NUMALAB_EINVAL);

    snprintf(want, sizeof want, "%s", numalab_version());
    EXPECT(strlen(want) > 0, "version");
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("numalab.h: every call and its errors as documented (%u node(s))\n", count);
    return 0;
}
