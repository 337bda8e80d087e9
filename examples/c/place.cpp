// The same from C++: a buffer placed by policy, owned by a unique_ptr,
// and a thread bound to node 0's CPUs for a block, restored after.
//   c++ place.cpp $(pkg-config --cflags --libs numalab) -o place++ && ./place++
#include <numalab.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <vector>

static void check(numalab_status status) {
    if (status != NUMALAB_OK) throw std::runtime_error(numalab_last_error());
}

struct Free {
    void operator()(void *p) const { numalab_free(p); }
};

int main() try {
    unsigned count = 0;
    check(numalab_node_count(&count));
    std::vector<uint64_t> pages(64);
    const size_t size = 16 << 20;

    void *raw = nullptr;
    check(numalab_alloc(size, "interleave:all", 1, &raw)); // every page made now
    std::unique_ptr<void, Free> buffer(raw);
    check(numalab_locate(buffer.get(), size, pages.data(), pages.size(), nullptr));
    for (unsigned i = 0; i < count; ++i) {
        unsigned node = 0, distance = 0;
        uint64_t total = 0, free = 0;
        check(numalab_node_id(i, &node));
        check(numalab_node_memory(node, &total, &free));
        check(numalab_distance(0, node, &distance));
        std::cout << "node " << node << ": " << pages[node] << " pages here, "
                  << (free >> 20) << " of " << (total >> 20) << " MiB free, distance from 0 "
                  << distance << "\n";
    }

    numalab_thread_state *saved = nullptr;
    check(numalab_thread_bind("local", "all", &saved));
    std::memset(buffer.get(), 0, size);
    check(numalab_thread_restore(saved));
    return 0;
} catch (const std::exception &e) {
    std::cerr << "numalab: " << e.what() << "\n";
    return 1;
}
