/* The C library in the guest (check c.place): memory from numalab_alloc
 * under "bind:N" for every node with memory and under "interleave:all",
 * each located by numalab_locate and read back from the kernel's
 * /proc/self/numa_maps; one JSON line per allocation for numalab-guest to
 * compare with the preset. Linked with libnumalab.a. */
#define _POSIX_C_SOURCE 200809L
#include <numalab.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGES 1024
#define MAX_NODES 64

static int maps(void *addr, char *policy, size_t policy_len, long *nodes) {
    FILE *f = fopen("/proc/self/numa_maps", "r");
    char line[4096], best_line[4096] = "";
    unsigned long best = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long start = strtoul(line, NULL, 16);
        if (start <= (unsigned long)addr && start >= best) {
            best = start;
            strcpy(best_line, line);
        }
    }
    fclose(f);
    for (int n = 0; n < MAX_NODES; n++) nodes[n] = 0;
    char *save = NULL, *field = strtok_r(best_line, " \n", &save);
    for (int i = 0; field; i++, field = strtok_r(NULL, " \n", &save)) {
        if (i == 1) snprintf(policy, policy_len, "%s", field);
        unsigned node;
        long pages;
        if (field[0] == 'N' && sscanf(field, "N%u=%ld", &node, &pages) == 2 && node < MAX_NODES)
            nodes[node] = pages;
    }
    return 0;
}

static void one(const char *policy) {
    size_t size = (size_t)PAGES * 4096;
    void *buffer;
    if (numalab_alloc(size, policy, 1, &buffer) != NUMALAB_OK) {
        printf("{\"policy\": \"%s\", \"error\": \"%s\"}\n", policy, numalab_last_error());
        return;
    }
    uint64_t located[MAX_NODES] = {0};
    numalab_status s = numalab_locate(buffer, size, located, MAX_NODES, NULL);
    char kernel[128] = "";
    long nodes[MAX_NODES];
    maps(buffer, kernel, sizeof kernel, nodes);
    printf("{\"policy\": \"%s\", \"status\": %d, \"numa_maps\": \"%s\", \"nodes\": {", policy, (int)s, kernel);
    const char *sep = "";
    for (int n = 0; n < MAX_NODES; n++)
        if (nodes[n]) { printf("%s\"%d\": %ld", sep, n, nodes[n]); sep = ", "; }
    printf("}, \"located\": {");
    sep = "";
    for (int n = 0; n < MAX_NODES; n++)
        if (located[n]) { printf("%s\"%d\": %llu", sep, n, (unsigned long long)located[n]); sep = ", "; }
    printf("}}\n");
    numalab_free(buffer);
}

int main(void) {
    FILE *f = fopen("/sys/devices/system/node/has_memory", "r");
    char list[256] = "";
    if (!f || !fgets(list, sizeof list, f)) return 1;
    fclose(f);
    char *save = NULL;
    for (char *part = strtok_r(list, ",\n", &save); part; part = strtok_r(NULL, ",\n", &save)) {
        unsigned lo, hi;
        if (sscanf(part, "%u-%u", &lo, &hi) != 2) hi = lo = (unsigned)atoi(part);
        for (unsigned n = lo; n <= hi; n++) {
            char policy[32];
            snprintf(policy, sizeof policy, "bind:%u", n);
            one(policy);
        }
    }
    one("interleave:all");
    return 0;
}
