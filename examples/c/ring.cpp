// numalab's ring from C++: a writer thread and a reader thread (two
// programs in real use, as PSRDada's), the handles owned by unique_ptr,
// a transfer with a header, blocks filled and read in place.
//   c++ -std=c++17 ring.cpp $(pkg-config --cflags --libs numalab) -pthread -o ring++ && ./ring++
#include <numalab.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

static void check(numalab_status status) {
    if (status != NUMALAB_OK) throw std::runtime_error(numalab_last_error());
}

struct CloseRing { void operator()(numalab_ring *r) const { numalab_ring_close(r); } };
struct CloseWriter { void operator()(numalab_writer *w) const { numalab_writer_close(w); } };
struct CloseReader { void operator()(numalab_reader *r) const { numalab_reader_close(r); } };

int main() try {
    const std::string name = "example-cpp-" + std::to_string(getpid());
    const size_t block_size = 1 << 20, blocks = 8, count = 64;

    numalab_ring *made = nullptr;
    check(numalab_ring_create(name.c_str(), blocks * block_size, block_size, "local", &made));
    std::unique_ptr<numalab_ring, CloseRing> ring(made);

    numalab_reader *joined = nullptr;  // join before the writer starts: it reads from here on
    check(numalab_reader_join(ring.get(), &joined));
    std::unique_ptr<numalab_reader, CloseReader> reader(joined);
    check(numalab_reader_set_timeout(reader.get(), 10000));

    std::thread writer_thread([&] {
        numalab_writer *attached = nullptr;
        check(numalab_writer_attach(ring.get(), &attached));
        std::unique_ptr<numalab_writer, CloseWriter> writer(attached);  // closing ends the stream
        check(numalab_writer_begin_transfer(writer.get(), "SOURCE J0437-4715\nNCHAN 1024\n"));
        for (size_t i = 0; i < count; ++i) {
            void *data = nullptr;
            size_t capacity = 0;
            check(numalab_writer_acquire(writer.get(), &data, &capacity));
            std::memset(data, static_cast<int>(i & 0xff), capacity);
            check(numalab_writer_commit(writer.get(), capacity, i + 1 == count));
        }
    });

    size_t got = 0, bytes = 0;
    bool in_order = true;
    for (;;) {
        const void *data = nullptr;
        size_t len = 0;
        int flags = 0;
        numalab_status status = numalab_reader_acquire(reader.get(), &data, &len, &flags);
        if (status == NUMALAB_END) break;
        check(status);
        if (len && static_cast<const unsigned char *>(data)[len - 1] != (got & 0xff)) in_order = false;
        if (flags & NUMALAB_BLOCK_START) {
            char header[256];
            uint64_t id = 0;
            check(numalab_reader_transfer(reader.get(), &id, header, sizeof header));
            std::cout << "transfer " << id << ":\n" << header;
        }
        got += len ? 1 : 0;
        bytes += len;
        check(numalab_reader_release(reader.get()));
    }
    writer_thread.join();
    std::cout << got << " blocks, " << (bytes >> 20) << " MiB, "
              << (in_order ? "every block in order" : "OUT OF ORDER") << "\n";
    return in_order && got == count ? 0 : 1;
} catch (const std::exception &e) {
    std::cerr << "numalab: " << e.what() << "\n";
    return 1;
}
