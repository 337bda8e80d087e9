/* Place a buffer on the last node with memory, check where its pages
 * landed, then interleave it over every node and check again.
 *   cc place.c $(pkg-config --cflags --libs numalab) -o place && ./place */
#include <numalab.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                        \
    do {                                                                   \
        numalab_status s_ = (call);                                        \
        if (s_ != NUMALAB_OK) {                                            \
            fprintf(stderr, "%s: %s\n", #call, numalab_last_error());      \
            return 1;                                                      \
        }                                                                  \
    } while (0)

int main(void) {
    unsigned count, last;
    CHECK(numalab_node_count(&count));
    CHECK(numalab_node_id(count - 1, &last));

    char policy[32];
    snprintf(policy, sizeof policy, "bind:%u", last);
    size_t size = 64 << 20;
    void *buffer;
    CHECK(numalab_alloc(size, policy, 0, &buffer)); /* placed, not touched */
    memset(buffer, 1, size);                         /* each page lands on `last` */

    uint64_t pages[64] = {0}, absent = 0;
    CHECK(numalab_locate(buffer, size, pages, 64, &absent));
    printf("%s: %llu pages on node %u, %llu not present\n", policy,
           (unsigned long long)pages[last], last, (unsigned long long)absent);

    int matched;
    char note[256];
    CHECK(numalab_place(buffer, size, "interleave:all", 1)); /* move them */
    CHECK(numalab_audit(buffer, size, "interleave:all", &matched, note, sizeof note));
    printf("%s\n", note);
    CHECK(numalab_free(buffer));
    return matched ? 0 : 2;
}
