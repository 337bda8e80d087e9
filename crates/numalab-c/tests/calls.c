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

    snprintf(want, sizeof want, "%s", numalab_version());
    EXPECT(strlen(want) > 0, "version");
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("numalab.h: every call and its errors as documented (%u node(s))\n", count);
    return 0;
}
