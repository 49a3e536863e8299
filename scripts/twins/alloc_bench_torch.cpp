// alloc_bench_torch.cpp - PyTorch's side of scripts/twins/alloc_bench.py: c10's CUDA caching allocator
// (c10::cuda::CUDACachingAllocator::raw_alloc / raw_delete, the device's current stream) timed on the patterns of
// `oomlab bench alloc`: k outstanding of one size, and the mixed workload that oomlab wrote (--workload-out).
// Plain C functions, loaded with ctypes: the script compiles this with g++ against the installed torch at run time.
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace A = c10::cuda::CUDACachingAllocator;

static double now_ns()
{
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void set_err(char *err, size_t len, const std::string &what)
{
    if (len > 0)
        snprintf(err, len, "%s", what.substr(0, what.find('\n')).c_str());
}

// ns per raw_alloc+raw_delete pair: one warm-up round of k, then `runs` runs of iters/k rounds, each run's
// figure into out[r]. 0, or 1 with the error in err.
extern "C" int oomlab_torch_hot(size_t bytes, int k, long iters, int runs, double *out, char *err, size_t errlen)
{
    try {
        std::vector<void *> p((size_t)k);
        long reps = iters / k > 0 ? iters / k : 1;
        for (int i = 0; i < k; i++)
            p[(size_t)i] = A::raw_alloc(bytes);
        for (int i = 0; i < k; i++)
            A::raw_delete(p[(size_t)i]);
        for (int r = 0; r < runs; r++) {
            double t0 = now_ns();
            for (long rep = 0; rep < reps; rep++) {
                for (int i = 0; i < k; i++)
                    p[(size_t)i] = A::raw_alloc(bytes);
                for (int i = 0; i < k; i++)
                    A::raw_delete(p[(size_t)i]);
            }
            out[r] = (now_ns() - t0) / ((double)reps * k);
        }
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, e.what());
        return 1;
    }
}

struct op {
    uint32_t slot;
    size_t bytes; // 0: free
};

// Read the workload file that `oomlab bench alloc --workload-out` wrote: its ops, and FNV-1a 64 of every line
// after the header (what oomlab reports as oomlab_workload_fnv1a). Every line is checked: a malloc into a free
// slot, a free of a live slot, every slot free at the end.
static bool read_workload(const char *path, std::vector<op> &ops, uint64_t *hash, std::string &why)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        why = std::string(path) + ": cannot open: " + strerror(errno);
        return false;
    }
    char line[256];
    uint64_t h = 0xcbf29ce484222325ULL;
    std::vector<bool> live;
    size_t nlive = 0, lineno = 0;
    bool ok = true;
    if (!fgets(line, sizeof line, f) || strncmp(line, "oomlab.alloc_workload/1 ", 24) != 0) {
        why = std::string(path) + ": not an oomlab.alloc_workload/1 file";
        ok = false;
    }
    lineno = 1;
    while (ok && fgets(line, sizeof line, f)) {
        lineno++;
        for (const char *c = line; *c; c++)
            h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
        unsigned slot = 0;
        unsigned long long bytes = 0;
        char kind = 0, end = 0;
        op o{};
        if (sscanf(line, "a %u %llu%c", &slot, &bytes, &end) == 3 && end == '\n' && bytes > 0 && slot < 65536) {
            kind = 'a';
        } else if (sscanf(line, "f %u%c", &slot, &end) == 2 && end == '\n' && slot < 65536) {
            kind = 'f';
        } else {
            why = std::string(path) + ":" + std::to_string(lineno) + ": not 'a SLOT BYTES' or 'f SLOT'";
            ok = false;
            break;
        }
        if (slot >= live.size())
            live.resize(slot + 1, false);
        if ((kind == 'a') == live[slot]) {
            why = std::string(path) + ":" + std::to_string(lineno) +
                  (kind == 'a' ? ": malloc into a live slot" : ": free of a free slot");
            ok = false;
            break;
        }
        live[slot] = kind == 'a';
        nlive += kind == 'a' ? 1 : -1;
        o.slot = slot;
        o.bytes = kind == 'a' ? (size_t)bytes : 0;
        ops.push_back(o);
    }
    fclose(f);
    if (ok && nlive != 0) {
        why = std::string(path) + ": slots still live at the end";
        ok = false;
    }
    *hash = h;
    return ok;
}

// ns per raw_alloc+raw_delete pair over the workload at path: one replay to warm up, then `runs` runs of whole
// replays (iters pairs, at least one replay), each run's figure into out[r]; the file's hash into *hash.
extern "C" int oomlab_torch_mixed(const char *path, long iters, int runs, double *out, uint64_t *hash, char *err,
                                  size_t errlen)
{
    std::vector<op> ops;
    std::string why;
    if (!read_workload(path, ops, hash, why)) {
        set_err(err, errlen, why);
        return 1;
    }
    try {
        size_t slots = 0;
        for (const op &o : ops)
            slots = std::max(slots, (size_t)o.slot + 1);
        std::vector<void *> p(slots, nullptr);
        long pairs = (long)ops.size() / 2;
        long reps = iters / pairs > 0 ? iters / pairs : 1;
        auto replay = [&]() {
            for (const op &o : ops) {
                if (o.bytes)
                    p[o.slot] = A::raw_alloc(o.bytes);
                else
                    A::raw_delete(p[o.slot]);
            }
        };
        replay();
        for (int r = 0; r < runs; r++) {
            double t0 = now_ns();
            for (long rep = 0; rep < reps; rep++)
                replay();
            out[r] = (now_ns() - t0) / ((double)reps * (double)pairs);
        }
        return 0;
    } catch (const std::exception &e) {
        set_err(err, errlen, e.what());
        return 1;
    }
}
