// fake_cuda.cpp: a stand-in CUDA driver, NVRTC and cuBLAS that run smelt's GPU launch path on
// the CPU, for testing that path (runtime/src/cuda/exec.rs, through cudarc) without a GPU.
//
// Built by scripts/build-fake-cuda.sh into three libraries, one per part:
//   -DSMELT_FAKE_DRIVER  libcuda.so.1     the driver API calls smelt and cudarc make
//   -DSMELT_FAKE_NVRTC   libnvrtc.so.12   "compiles" CUDA C with the host C++ compiler against
//                                         the CPU emulator header (smelt_cuda_emu.h, in the
//                                         include/ folder next to the library)
//   -DSMELT_FAKE_CUBLAS  libcublas.so.12  cublasGemmStridedBatchedEx, column-major, on streams
// Point SMELT_CUDA_DRIVER_LIB, SMELT_NVRTC_LIB, SMELT_CUBLAS_LIB and SMELT_CUDA_INCLUDE at them.
//
// NOT A GPU. It checks what the host side of the launch path does, which no test could run
// before: argument packing for cuLaunchKernel, every device pointer and byte range handed to
// the driver and cuBLAS (inside a live allocation, or an error naming the call), cuBLAS's
// leading-dimension rules, the order of work on streams and events. Streams are real worker
// threads that start each operation after a delay (SMELT_FAKE_CUDA_DELAY_US, default 200), so
// a result read before its stream was synchronised is stale, not right by luck; new device and
// pinned memory is filled with 0xff bytes (NaN floats), so memory used before it is written
// shows. Kernels run under the emulator (blocks of fibers; see smelt_cuda_emu.h). A kernel
// fault is sticky, as on a GPU: every later call returns CUDA_ERROR_LAUNCH_FAILED, and
// cuGetErrorString says what failed.
//
// The "cubin" is the kernels built as a shared library, behind an 8-byte magic and its length;
// "PTX" (compute_XY) is the same bytes in hex in a comment. Real PTX (the LLVM NVPTX path)
// cannot run here: cuModuleLoadData reports CUDA_ERROR_INVALID_PTX.
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

// "\x7fSMELTEM" then the library's byte count (little-endian u64), then the library.
const char IMAGE_MAGIC[8] = {'\x7f', 'S', 'M', 'E', 'L', 'T', 'E', 'M'};
const char PTX_MARKER[] = "//SMELT-FAKE-IMAGE ";

// printf into a std::string.
std::string format(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

}  // namespace

// ================================================================================ driver
#ifdef SMELT_FAKE_DRIVER

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum : int {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

namespace {

struct Ctx {
    int device;
};

struct Alloc {
    size_t bytes;
    bool pinned;
    void* map;        // the mapping holding it (null: not ours to unmap, e.g. a module global)
    size_t map_bytes;
};

struct Event {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t recorded = 0;   // records issued
    uint64_t completed = 0;  // records that have happened
    std::chrono::steady_clock::time_point at;
};

typedef void (*Work)(void*);

void worker_main(struct Stream* s);

// Owned by g_streams and by whoever is waiting on it (shared_ptr), so a stream destroyed while
// another thread drains it lives until that thread is done; the last owner joins the worker.
struct Stream {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<Work, void*>> queue;
    bool busy = false;
    bool stop = false;
    std::thread worker;
    Stream() : worker(worker_main, this) {}
    ~Stream() {
        {
            std::lock_guard<std::mutex> lock(mu);
            stop = true;
            cv.notify_all();
        }
        worker.join();  // queued work still completes, as in CUDA
    }
};

struct Module {
    void* lib;
    const char* (*last_error)();
    std::vector<uintptr_t> globals;  // registered in g_allocs by cuModuleGetGlobal
};

struct Function {
    Module* module;
    std::string name;
    int (*entry)(unsigned, unsigned, void**);
    unsigned (*pack)(void**, unsigned long long*, unsigned long long*);
};

std::atomic<bool> g_initialised{false};
Ctx g_primary{0};
int g_primary_refs = 0;
thread_local Ctx* t_current = nullptr;

std::mutex g_mu;  // guards the maps below and g_sticky_message
std::map<uintptr_t, Alloc> g_allocs;
std::vector<std::shared_ptr<Stream>> g_streams;
std::string g_sticky_message;
std::atomic<int> g_sticky{0};

// The detail of the last error this thread got, for cuGetErrorString.
thread_local std::string t_detail;
thread_local int t_detail_code = 0;

CUresult fail(CUresult code, const std::string& detail) {
    t_detail = detail;
    t_detail_code = code;
    return code;
}

int delay_us() {
    static int d = [] {
        const char* v = getenv("SMELT_FAKE_CUDA_DELAY_US");
        return v && *v ? atoi(v) : 200;
    }();
    return d;
}

// Is [p, p + bytes) inside one live allocation (device or pinned, as `pinned` says; -1:
// either)? Returns an empty string, or what is wrong.
std::string check_range(uintptr_t p, size_t bytes, int pinned, const char* what) {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_allocs.upper_bound(p);
    if (it != g_allocs.begin()) {
        --it;
        const uintptr_t start = it->first;
        const bool kind_ok = pinned < 0 || it->second.pinned == (pinned == 1);
        if (kind_ok && p >= start && p - start <= it->second.bytes &&
            bytes <= it->second.bytes - (p - start))
            return "";
        if (kind_ok && p >= start && p - start < it->second.bytes)
            return format("%s: %#llx + %zu bytes runs %zu bytes past the end of its %s "
                          "allocation of %zu bytes at %#llx",
                          what, (unsigned long long)p, bytes,
                          (size_t)(p - start + bytes - it->second.bytes),
                          it->second.pinned ? "pinned" : "device", it->second.bytes,
                          (unsigned long long)start);
    }
    return format("%s: %#llx (%zu bytes) is not in any live %s allocation", what,
                  (unsigned long long)p, bytes,
                  pinned < 0 ? "device or pinned" : pinned ? "pinned host" : "device");
}

bool is_pinned(const void* p, size_t bytes) {
    return bytes > 0 && check_range((uintptr_t)p, bytes, 1, "").empty();
}

void worker_main(Stream* s) {
    std::unique_lock<std::mutex> lock(s->mu);
    for (;;) {
        s->cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
        if (s->queue.empty()) return;  // stop, and nothing left
        auto work = s->queue.front();
        s->queue.pop_front();
        s->busy = true;
        lock.unlock();
        if (delay_us() > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us()));
        // Work after a sticky error is dropped, as a faulted GPU context does nothing more.
        if (g_sticky.load() == 0) work.first(work.second);
        lock.lock();
        s->busy = false;
        s->cv.notify_all();
    }
}

void drain(Stream* s) {
    std::unique_lock<std::mutex> lock(s->mu);
    s->cv.wait(lock, [&] { return s->queue.empty() && !s->busy; });
}

void drain_all() {
    std::vector<std::shared_ptr<Stream>> all;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        all = g_streams;
    }
    for (auto& s : all) drain(s.get());
}

// The live stream behind a handle, or null.
std::shared_ptr<Stream> find_stream(void* handle) {
    std::lock_guard<std::mutex> lock(g_mu);
    for (auto& t : g_streams)
        if (t.get() == handle) return t;
    return nullptr;
}

bool known_stream(void* handle) { return find_stream(handle) != nullptr; }

// Runs `work(data)` in stream order. Every stream smelt and cudarc create is non-blocking, and
// the legacy null stream (0) waits for no non-blocking stream, so null-stream work runs at once
// on the calling thread.
CUresult enqueue(void* stream, Work work, void* data) {
    if (!stream) {
        work(data);
        return CUDA_SUCCESS;
    }
    std::shared_ptr<Stream> s = find_stream(stream);
    if (!s) {
        // `data` is dropped unfreed: every caller checked the stream just before, so only a
        // stream destroyed meanwhile by another thread (a caller's bug) gets here.
        return fail(CUDA_ERROR_INVALID_HANDLE, "fake CUDA: not a live stream");
    }
    std::lock_guard<std::mutex> lock(s->mu);
    s->queue.emplace_back(work, data);
    s->cv.notify_all();
    return CUDA_SUCCESS;
}

void set_sticky(const std::string& message) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_sticky.load() == 0) {
        g_sticky_message = message;
        g_sticky.store(CUDA_ERROR_LAUNCH_FAILED);
        fprintf(stderr, "fake CUDA: %s\n", message.c_str());
    }
}

#define CHECK_INIT()                                                                    \
    do {                                                                                \
        if (!g_initialised.load()) return CUDA_ERROR_NOT_INITIALIZED;                   \
        if (int sticky = g_sticky.load()) return sticky;                                \
    } while (0)

#define CHECK_CTX()                                                                     \
    do {                                                                                \
        CHECK_INIT();                                                                   \
        if (!t_current) return fail(CUDA_ERROR_INVALID_CONTEXT, "fake CUDA: no current context"); \
    } while (0)

struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
    bool owned_src;  // `src` is a staged copy to free afterwards
};

void do_copy(void* p) {
    Copy* c = (Copy*)p;
    memmove(c->dst, c->src, c->bytes);
    if (c->owned_src) free((void*)c->src);
    delete c;
}

struct Set {
    void* dst;
    unsigned char value;
    size_t bytes;
};

void do_set(void* p) {
    Set* s = (Set*)p;
    memset(s->dst, s->value, s->bytes);
    delete s;
}

struct Record {
    Event* event;
    uint64_t n;
};

void do_record(void* p) {
    Record* r = (Record*)p;
    {
        std::lock_guard<std::mutex> lock(r->event->mu);
        r->event->at = std::chrono::steady_clock::now();
        if (r->n > r->event->completed) r->event->completed = r->n;
        r->event->cv.notify_all();
    }
    delete r;
}

void do_wait(void* p) {
    Record* r = (Record*)p;
    {
        std::unique_lock<std::mutex> lock(r->event->mu);
        r->event->cv.wait(lock, [&] { return r->event->completed >= r->n; });
    }
    delete r;
}

struct Launch {
    Function* f;
    unsigned grid, block;
    unsigned long long slots[64];
    unsigned count;
};

void do_launch(void* p) {
    Launch* l = (Launch*)p;
    void* args[64];
    for (unsigned i = 0; i < l->count; ++i) args[i] = &l->slots[i];
    if (l->f->entry(l->grid, l->block, args) != 0)
        set_sticky(format("kernel %s (%u blocks of %u threads) failed: %s", l->f->name.c_str(),
                          l->grid, l->block, l->f->module->last_error()));
    delete l;
}

// The copy of `bytes` from `src` to `dst` on `stream`, after checking the device side(s).
// `dst_kind` / `src_kind`: 0 device memory, 2 host memory (pinned or pageable). As in CUDA, a
// pageable source is staged before the call returns and a copy into pageable memory is
// synchronous; only pinned host memory takes part asynchronously.
CUresult copy(const char* call, void* dst, const void* src, size_t bytes, void* stream,
              int dst_kind, int src_kind) {
    CHECK_CTX();
    if (bytes == 0) return CUDA_SUCCESS;
    if (dst_kind == 0) {
        std::string e = check_range((uintptr_t)dst, bytes, 0, "destination");
        if (!e.empty()) return fail(CUDA_ERROR_INVALID_VALUE, format("fake CUDA: %s: %s", call, e.c_str()));
    }
    if (src_kind == 0) {
        std::string e = check_range((uintptr_t)src, bytes, 0, "source");
        if (!e.empty()) return fail(CUDA_ERROR_INVALID_VALUE, format("fake CUDA: %s: %s", call, e.c_str()));
    }
    if (stream && !known_stream(stream))
        return fail(CUDA_ERROR_INVALID_HANDLE, format("fake CUDA: %s: not a live stream", call));
    Copy* c = new Copy{dst, src, bytes, false};
    if (src_kind == 2 && !is_pinned(src, bytes)) {
        // Pageable source: staged at once, so the caller may reuse it when the call returns.
        void* staged = malloc(bytes);
        memcpy(staged, src, bytes);
        c->src = staged;
        c->owned_src = true;
    }
    const bool sync_after = dst_kind == 2 && !is_pinned(dst, bytes);
    CUresult r = enqueue(stream, do_copy, c);
    if (r == CUDA_SUCCESS && sync_after && stream) {
        if (auto s = find_stream(stream)) drain(s.get());
    }
    return r;
}

std::string hex_decode(const char* s, size_t n, bool* ok) {
    std::string out;
    out.reserve(n / 2);
    *ok = n % 2 == 0;
    for (size_t i = 0; *ok && i < n; i += 2) {
        auto v = [&](char c) {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            *ok = false;
            return 0;
        };
        out.push_back((char)(v(s[i]) * 16 + v(s[i + 1])));
    }
    return out;
}

}  // namespace

FAKE_API CUresult cuInit(unsigned flags) {
    if (flags != 0) return fail(CUDA_ERROR_INVALID_VALUE, "fake CUDA: cuInit flags must be 0");
    g_initialised.store(true);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDriverGetVersion(int* version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 12090;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuGetErrorString(CUresult code, const char** out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    static thread_local std::string s;
    const char* base;
    switch (code) {
        case CUDA_SUCCESS: base = "no error"; break;
        case CUDA_ERROR_INVALID_VALUE: base = "invalid argument"; break;
        case CUDA_ERROR_OUT_OF_MEMORY: base = "out of memory"; break;
        case CUDA_ERROR_NOT_INITIALIZED: base = "initialization error"; break;
        case CUDA_ERROR_INVALID_DEVICE: base = "invalid device ordinal"; break;
        case CUDA_ERROR_INVALID_IMAGE: base = "device kernel image is invalid"; break;
        case CUDA_ERROR_INVALID_CONTEXT: base = "invalid device context"; break;
        case CUDA_ERROR_INVALID_PTX: base = "a PTX JIT compilation failed"; break;
        case CUDA_ERROR_INVALID_HANDLE: base = "invalid resource handle"; break;
        case CUDA_ERROR_NOT_FOUND: base = "named symbol not found"; break;
        case CUDA_ERROR_NOT_READY: base = "device not ready"; break;
        case CUDA_ERROR_LAUNCH_FAILED: base = "unspecified launch failure"; break;
        case CUDA_ERROR_NOT_SUPPORTED: base = "operation not supported"; break;
        default: base = "unknown error"; break;
    }
    s = base;
    if (code == CUDA_ERROR_LAUNCH_FAILED && g_sticky.load() != 0) {
        std::lock_guard<std::mutex> lock(g_mu);
        s += " (fake CUDA: " + g_sticky_message + ")";
    } else if (code == t_detail_code && !t_detail.empty()) {
        s += " (" + t_detail + ")";
    }
    *out = s.c_str();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuGetErrorName(CUresult code, const char** out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    static thread_local std::string s;
    s = format("CUDA_ERROR_%d", code);
    *out = s.c_str();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetCount(int* count) {
    CHECK_INIT();
    *count = 1;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
    CHECK_INIT();
    if (ordinal != 0) return fail(CUDA_ERROR_INVALID_DEVICE, format("fake CUDA: device %d (one device: 0)", ordinal));
    *device = 0;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetName(char* name, int len, CUdevice device) {
    CHECK_INIT();
    if (device != 0 || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    // smelt_runtime::cuda::FAKE_DEVICE_NAME: how smelt tells this device from a GPU.
    snprintf(name, (size_t)len, "smelt fake CUDA device (CPU emulator, not a GPU)");
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
    CHECK_INIT();
    if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)16 << 30;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice device) {
    CHECK_INIT();
    if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
    switch (attribute) {
        case 1: *value = 1024; break;     // MAX_THREADS_PER_BLOCK
        case 2: *value = 1024; break;     // MAX_BLOCK_DIM_X
        case 5: *value = 2147483647; break;  // MAX_GRID_DIM_X
        case 8: *value = 49152; break;    // MAX_SHARED_MEMORY_PER_BLOCK
        case 10: *value = 32; break;      // WARP_SIZE
        case 16: *value = 4; break;       // MULTIPROCESSOR_COUNT
        case 75: *value = 9; break;       // COMPUTE_CAPABILITY_MAJOR
        case 76: *value = 0; break;       // COMPUTE_CAPABILITY_MINOR
        case 115: *value = 0; break;      // MEMORY_POOLS_SUPPORTED
        default: *value = 0; break;
    }
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRetain(void** ctx, CUdevice device) {
    CHECK_INIT();
    if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_primary_refs;
    *ctx = &g_primary;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
    CHECK_INIT();
    if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_primary_refs == 0) return fail(CUDA_ERROR_INVALID_CONTEXT, "fake CUDA: primary context released more often than retained");
    --g_primary_refs;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetCurrent(void** ctx) {
    CHECK_INIT();
    *ctx = t_current;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSetCurrent(void* ctx) {
    CHECK_INIT();
    if (ctx && ctx != &g_primary) return fail(CUDA_ERROR_INVALID_CONTEXT, "fake CUDA: unknown context");
    t_current = (Ctx*)ctx;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSynchronize() {
    CHECK_CTX();
    drain_all();
    if (int sticky = g_sticky.load()) return sticky;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamCreate(void** stream, unsigned flags) {
    CHECK_CTX();
    if (flags != 1)  // smelt and cudarc create CU_STREAM_NON_BLOCKING streams only
        return fail(CUDA_ERROR_NOT_SUPPORTED, format("fake CUDA: stream flags %u (only non-blocking streams are emulated)", flags));
    auto s = std::make_shared<Stream>();
    std::lock_guard<std::mutex> lock(g_mu);
    g_streams.push_back(s);
    *stream = s.get();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamDestroy_v2(void* stream) {
    CHECK_INIT();
    std::shared_ptr<Stream> s;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        auto it = g_streams.begin();
        while (it != g_streams.end() && it->get() != stream) ++it;
        if (it == g_streams.end()) return fail(CUDA_ERROR_INVALID_HANDLE, "fake CUDA: cuStreamDestroy of an unknown stream");
        s = *it;
        g_streams.erase(it);
    }
    // As in CUDA, work already queued still completes (the last owner joins the worker).
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamSynchronize(void* stream) {
    CHECK_CTX();
    if (stream) {
        std::shared_ptr<Stream> s = find_stream(stream);
        if (!s) return fail(CUDA_ERROR_INVALID_HANDLE, "fake CUDA: cuStreamSynchronize of an unknown stream");
        drain(s.get());
    }
    if (int sticky = g_sticky.load()) return sticky;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamQuery(void* stream) {
    CHECK_CTX();
    if (!stream) return CUDA_SUCCESS;
    std::shared_ptr<Stream> s = find_stream(stream);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    std::lock_guard<std::mutex> lock(s->mu);
    return s->queue.empty() && !s->busy ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKE_API CUresult cuEventCreate(void** event, unsigned flags) {
    CHECK_CTX();
    (void)flags;
    *event = new Event;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventDestroy_v2(void* event) {
    CHECK_INIT();
    Event* e = (Event*)event;
    // Pending records and waits still use it: wait for them.
    drain_all();
    delete e;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventRecord(void* event, void* stream) {
    CHECK_CTX();
    Event* e = (Event*)event;
    uint64_t n;
    {
        std::lock_guard<std::mutex> lock(e->mu);
        n = ++e->recorded;
    }
    return enqueue(stream, do_record, new Record{e, n});
}

FAKE_API CUresult cuEventSynchronize(void* event) {
    CHECK_CTX();
    Event* e = (Event*)event;
    std::unique_lock<std::mutex> lock(e->mu);
    e->cv.wait(lock, [&] { return e->completed >= e->recorded; });
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventQuery(void* event) {
    CHECK_CTX();
    Event* e = (Event*)event;
    std::lock_guard<std::mutex> lock(e->mu);
    return e->completed >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKE_API CUresult cuEventElapsedTime(float* ms, void* start, void* end) {
    CHECK_CTX();
    Event *a = (Event*)start, *b = (Event*)end;
    std::chrono::steady_clock::time_point ta, tb;
    {
        std::lock_guard<std::mutex> lock(a->mu);
        if (a->recorded == 0 || a->completed < a->recorded) return CUDA_ERROR_NOT_READY;
        ta = a->at;
    }
    {
        std::lock_guard<std::mutex> lock(b->mu);
        if (b->recorded == 0 || b->completed < b->recorded) return CUDA_ERROR_NOT_READY;
        tb = b->at;
    }
    *ms = std::chrono::duration<float, std::milli>(tb - ta).count();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamWaitEvent(void* stream, void* event, unsigned flags) {
    CHECK_CTX();
    (void)flags;
    Event* e = (Event*)event;
    uint64_t n;
    {
        std::lock_guard<std::mutex> lock(e->mu);
        n = e->recorded;
    }
    return enqueue(stream, do_wait, new Record{e, n});
}

namespace {
// Every allocation is 256-byte aligned and ends (rounded up to 256 bytes) at an inaccessible
// page, so a kernel or copy running past it faults at once, as on a GPU, instead of corrupting
// the host's heap.
CUresult alloc(void** out, size_t bytes, bool pinned) {
    if (bytes == 0) return fail(CUDA_ERROR_INVALID_VALUE, "fake CUDA: allocation of 0 bytes");
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t rounded = (bytes + 255) / 256 * 256, body = (rounded + page - 1) / page * page;
    void* map = mmap(nullptr, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    if (mprotect((char*)map + body, page, PROT_NONE) != 0) {
        munmap(map, body + page);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    char* p = (char*)map + (body - rounded);
    memset(p, 0xff, rounded);  // NaN floats: memory read before it is written shows
    std::lock_guard<std::mutex> lock(g_mu);
    // Nothing live can be where the new mapping is.
    g_allocs.erase(g_allocs.lower_bound((uintptr_t)map), g_allocs.lower_bound((uintptr_t)map + body + page));
    g_allocs[(uintptr_t)p] = Alloc{bytes, pinned, map, body + page};
    *out = p;
    return CUDA_SUCCESS;
}

CUresult release(void* p, bool pinned, const char* call) {
    // As cudaFree: the device is idle before the memory goes.
    drain_all();
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.pinned != pinned || !it->second.map)
        return fail(CUDA_ERROR_INVALID_VALUE, format("fake CUDA: %s of %p, which is not a live %s allocation", call, p, pinned ? "pinned" : "device"));
    munmap(it->second.map, it->second.map_bytes);
    g_allocs.erase(it);
    return CUDA_SUCCESS;
}
}  // namespace

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t bytes) {
    CHECK_CTX();
    void* p = nullptr;
    CUresult r = alloc(&p, bytes, false);
    if (r == CUDA_SUCCESS) *out = (CUdeviceptr)(uintptr_t)p;
    return r;
}

FAKE_API CUresult cuMemFree_v2(CUdeviceptr p) {
    CHECK_CTX();
    return release((void*)(uintptr_t)p, false, "cuMemFree");
}

FAKE_API CUresult cuMemHostAlloc(void** out, size_t bytes, unsigned flags) {
    CHECK_CTX();
    (void)flags;
    return alloc(out, bytes, true);
}

FAKE_API CUresult cuMemAllocHost_v2(void** out, size_t bytes) {
    CHECK_CTX();
    return alloc(out, bytes, true);
}

FAKE_API CUresult cuMemFreeHost(void* p) {
    CHECK_CTX();
    return release(p, true, "cuMemFreeHost");
}

FAKE_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    CHECK_CTX();
    *free_bytes = (size_t)15 << 30;
    *total = (size_t)16 << 30;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
    return copy("cuMemcpyHtoD", (void*)(uintptr_t)dst, src, bytes, nullptr, 0, 2);
}
FAKE_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
    return copy("cuMemcpyDtoH", dst, (void*)(uintptr_t)src, bytes, nullptr, 2, 0);
}
FAKE_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    return copy("cuMemcpyDtoD", (void*)(uintptr_t)dst, (void*)(uintptr_t)src, bytes, nullptr, 0, 0);
}
FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, void* stream) {
    return copy("cuMemcpyHtoDAsync", (void*)(uintptr_t)dst, src, bytes, stream, 0, 2);
}
FAKE_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, void* stream) {
    return copy("cuMemcpyDtoHAsync", dst, (void*)(uintptr_t)src, bytes, stream, 2, 0);
}
FAKE_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void* stream) {
    return copy("cuMemcpyDtoDAsync", (void*)(uintptr_t)dst, (void*)(uintptr_t)src, bytes, stream, 0, 0);
}

namespace {
CUresult memset8(const char* call, CUdeviceptr dst, unsigned char value, size_t bytes, void* stream) {
    CHECK_CTX();
    if (bytes == 0) return CUDA_SUCCESS;
    std::string e = check_range((uintptr_t)dst, bytes, 0, "destination");
    if (!e.empty()) return fail(CUDA_ERROR_INVALID_VALUE, format("fake CUDA: %s: %s", call, e.c_str()));
    return enqueue(stream, do_set, new Set{(void*)(uintptr_t)dst, value, bytes});
}
}  // namespace

FAKE_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t bytes) {
    return memset8("cuMemsetD8", dst, value, bytes, nullptr);
}
FAKE_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes, void* stream) {
    return memset8("cuMemsetD8Async", dst, value, bytes, stream);
}

FAKE_API CUresult cuModuleLoadData(void** module, const void* image) {
    CHECK_CTX();
    const char* p = (const char*)image;
    std::string bytes;
    if (memcmp(p, IMAGE_MAGIC, 8) == 0) {
        uint64_t n;
        memcpy(&n, p + 8, 8);
        bytes.assign(p + 16, n);
    } else {
        const char* marker = strstr(p, PTX_MARKER);
        if (!marker)
            return fail(CUDA_ERROR_INVALID_PTX, "fake CUDA: this image was not made by the fake NVRTC (the fake driver cannot run real PTX or cubins)");
        const char* hex = marker + strlen(PTX_MARKER);
        size_t n = strcspn(hex, "\n");
        bool ok;
        bytes = hex_decode(hex, n, &ok);
        if (!ok) return fail(CUDA_ERROR_INVALID_PTX, "fake CUDA: corrupt fake PTX");
    }
    // Each module is its own copy of the library (own status word, own statics).
    const char* tmp = getenv("TMPDIR");
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/smelt-fake-module-XXXXXX";
    std::vector<char> name(path.begin(), path.end());
    name.push_back(0);
    int fd = mkstemp(name.data());
    if (fd < 0) return fail(CUDA_ERROR_INVALID_IMAGE, "fake CUDA: cannot create a temporary file");
    bool written = write(fd, bytes.data(), bytes.size()) == (ssize_t)bytes.size();
    close(fd);
    void* lib = written ? dlopen(name.data(), RTLD_NOW | RTLD_LOCAL) : nullptr;
    std::string why = lib ? "" : (written ? dlerror() : "short write");
    unlink(name.data());
    if (!lib) return fail(CUDA_ERROR_INVALID_IMAGE, "fake CUDA: cannot load the image: " + why);
    auto last_error = (const char* (*)())dlsym(lib, "smelt_emu_last_error");
    if (!last_error) {
        dlclose(lib);
        return fail(CUDA_ERROR_INVALID_IMAGE, "fake CUDA: the image has no smelt_emu_last_error");
    }
    *module = new Module{lib, last_error, {}};
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleUnload(void* module) {
    CHECK_INIT();
    Module* m = (Module*)module;
    drain_all();  // no kernel of it may still run
    {
        std::lock_guard<std::mutex> lock(g_mu);
        for (uintptr_t g : m->globals) g_allocs.erase(g);
    }
    dlclose(m->lib);
    delete m;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
    CHECK_CTX();
    Module* m = (Module*)module;
    auto entry = (int (*)(unsigned, unsigned, void**))dlsym(m->lib, (std::string("smelt_emu_") + name).c_str());
    auto pack = (unsigned (*)(void**, unsigned long long*, unsigned long long*))dlsym(
        m->lib, (std::string("smelt_emu_pack_") + name).c_str());
    if (!entry || !pack) return fail(CUDA_ERROR_NOT_FOUND, format("fake CUDA: no kernel named %s in the module", name));
    *function = new Function{m, name, entry, pack};
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleGetGlobal_v2(CUdeviceptr* ptr, size_t* bytes, void* module, const char* name) {
    CHECK_CTX();
    Module* m = (Module*)module;
    auto global = (void* (*)(unsigned long long*))dlsym(m->lib, (std::string("smelt_emu_global_") + name).c_str());
    if (!global) return fail(CUDA_ERROR_NOT_FOUND, format("fake CUDA: no __device__ variable named %s", name));
    unsigned long long n = 0;
    void* p = global(&n);
    // The variable is device memory: register it so copies from it are checked like others.
    {
        std::lock_guard<std::mutex> lock(g_mu);
        g_allocs[(uintptr_t)p] = Alloc{(size_t)n, false, nullptr, 0};
        m->globals.push_back((uintptr_t)p);
    }
    if (ptr) *ptr = (CUdeviceptr)(uintptr_t)p;
    if (bytes) *bytes = (size_t)n;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shared_bytes, void* stream,
                                 void** params, void** extra) {
    CHECK_CTX();
    Function* f = (Function*)function;
    if (gy != 1 || gz != 1 || by != 1 || bz != 1)
        return fail(CUDA_ERROR_INVALID_VALUE, format("fake CUDA: %s: a %ux%ux%u grid of %ux%ux%u blocks (only 1-D launches are emulated)", f->name.c_str(), gx, gy, gz, bx, by, bz));
    if (gx == 0 || bx == 0 || bx > 1024)
        return fail(CUDA_ERROR_INVALID_VALUE, format("fake CUDA: %s: %u blocks of %u threads", f->name.c_str(), gx, bx));
    if (shared_bytes != 0)
        return fail(CUDA_ERROR_NOT_SUPPORTED, format("fake CUDA: %s: %u bytes of dynamic shared memory (not emulated)", f->name.c_str(), shared_bytes));
    if (extra) return fail(CUDA_ERROR_NOT_SUPPORTED, format("fake CUDA: %s: the `extra` launch parameters (not emulated)", f->name.c_str()));
    if (!params) return fail(CUDA_ERROR_INVALID_VALUE, format("fake CUDA: %s: no kernel parameters", f->name.c_str()));
    Launch* l = new Launch;
    l->f = f;
    l->grid = gx;
    l->block = bx;
    unsigned long long pointers = 0;
    l->count = f->pack(params, l->slots, &pointers);
    for (unsigned i = 0; i < l->count; ++i) {
        if (!(pointers >> i & 1)) continue;
        uintptr_t p = (uintptr_t)l->slots[i];
        std::string e = check_range(p, 0, 0, "pointer");
        if (!e.empty()) {
            delete l;
            return fail(CUDA_ERROR_INVALID_VALUE, format("fake CUDA: %s: argument %u: %s", f->name.c_str(), i, e.c_str()));
        }
    }
    if (stream && !known_stream(stream)) {
        delete l;
        return fail(CUDA_ERROR_INVALID_HANDLE, format("fake CUDA: %s: not a live stream", f->name.c_str()));
    }
    return enqueue(stream, do_launch, l);
}

// For the fake cuBLAS (linked against this library).
FAKE_API int smelt_fake_cuda_check_range(unsigned long long p, size_t bytes, char* why, size_t why_len) {
    std::string e = check_range((uintptr_t)p, bytes, 0, "operand");
    if (e.empty()) return 1;
    snprintf(why, why_len, "%s", e.c_str());
    return 0;
}

FAKE_API int smelt_fake_cuda_enqueue(void* stream, void (*work)(void*), void* data) {
    // After a kernel fault nothing more runs (`data` is dropped unfreed, as by the workers).
    if (int sticky = g_sticky.load()) return sticky;
    return enqueue(stream, work, data);
}

#endif  // SMELT_FAKE_DRIVER

// ================================================================================ NVRTC
#ifdef SMELT_FAKE_NVRTC

typedef int nvrtcResult;
enum : int {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_INTERNAL_ERROR = 11,
};

namespace {

const int ARCHS[] = {75, 80, 86, 89, 90};

struct Program {
    std::string source, name, log, image;
    bool ptx = false;
    bool compiled = false;
};

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'') out += "'\\''";
        else out += c;
    }
    return out + "'";
}

// The folder holding this library.
std::string own_dir() {
    Dl_info info;
    if (!dladdr((void*)&own_dir, &info) || !info.dli_fname) return ".";
    std::string p = info.dli_fname;
    size_t slash = p.rfind('/');
    return slash == std::string::npos ? "." : p.substr(0, slash);
}

std::string compiler() {
    for (const char* var : {"SMELT_CXX", "CXX"}) {
        const char* v = getenv(var);
        if (v && *v) return v;
    }
    return "c++";
}

bool read_file(const std::string& path, std::string* out) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return false;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
    fclose(f);
    return true;
}

bool is_ident(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The names of the `__global__` functions and of the module-scope `__device__` variables.
void scan(const std::string& src, std::vector<std::string>* kernels, std::vector<std::string>* globals) {
    size_t at = 0;
    while ((at = src.find("__global__", at)) != std::string::npos) {
        at += 10;
        size_t paren = src.find('(', at);
        // Skip `__launch_bounds__(...)`.
        size_t lb = src.find("__launch_bounds__", at);
        if (lb != std::string::npos && lb < paren) {
            size_t close = src.find(')', lb);
            if (close == std::string::npos) break;
            paren = src.find('(', close);
        }
        if (paren == std::string::npos) break;
        size_t end = paren;
        while (end > at && src[end - 1] == ' ') --end;
        size_t start = end;
        while (start > at && is_ident(src[start - 1])) --start;
        if (start < end) kernels->push_back(src.substr(start, end - start));
        at = paren;
    }
    at = 0;
    while ((at = src.find("__device__", at)) != std::string::npos) {
        at += 10;
        size_t semi = src.find(';', at), paren = src.find('(', at), brace = src.find('{', at);
        if (semi == std::string::npos || paren < semi || brace < semi) continue;
        size_t end = semi;
        while (end > at && src[end - 1] == ' ') --end;
        size_t start = end;
        while (start > at && is_ident(src[start - 1])) --start;
        if (start < end) globals->push_back(src.substr(start, end - start));
    }
}

nvrtcResult compile(Program* p, int arch) {
    const char* tmp = getenv("TMPDIR");
    std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/smelt-fake-nvrtc-XXXXXX";
    std::vector<char> d(dir.begin(), dir.end());
    d.push_back(0);
    if (!mkdtemp(d.data())) {
        p->log = "fake NVRTC: cannot create a temporary folder";
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    dir = d.data();
    std::vector<std::string> kernels, globals;
    scan(p->source, &kernels, &globals);
    std::string tu = "#include \"smelt_cuda_emu.h\"\n#line 1 \"" + p->name + "\"\n" + p->source +
                     "\n#line 1 \"<fake NVRTC entry points>\"\n";
    for (auto& k : kernels) tu += "SMELT_EMU_ENTRY(" + k + ")\n";
    for (auto& g : globals) tu += "SMELT_EMU_GLOBAL(" + g + ")\n";
    tu += format("// sm_%d\n", arch);
    {
        FILE* f = fopen((dir + "/program.cpp").c_str(), "wb");
        if (!f) return NVRTC_ERROR_INTERNAL_ERROR;
        fwrite(tu.data(), 1, tu.size(), f);
        fclose(f);
    }
    const std::string cxx = shell_quote(compiler()), q = shell_quote(dir);
    // The emulator's flags (runtime/src/cuda/emulate.rs, build_library).
    std::string flags =
        "-std=c++17 -O1 -fPIC -w -ffp-contract=off -fno-fast-math -fno-strict-aliasing "
        "-fsanitize=alignment -fvisibility=hidden";
#if defined(__x86_64__)
    flags += " -fcf-protection=none";
#endif
    std::string cmd = cxx + " " + flags + " -I " + shell_quote(own_dir() + "/include") + " -c -o " + q +
                      "/program.o " + q + "/program.cpp 2> " + q + "/log && " + cxx +
                      " -shared -Wl,-Bsymbolic -Wl,-z,defs -o " + q + "/program.so " + q +
                      "/program.o 2>> " + q + "/log";
    int rc = system(cmd.c_str());
    std::string log, lib;
    read_file(dir + "/log", &log);
    bool ok = rc == 0 && read_file(dir + "/program.so", &lib);
    system(("rm -rf " + q).c_str());
    p->log = log;
    if (!ok) {
        if (p->log.empty()) p->log = format("fake NVRTC: %s failed (status %d)", compiler().c_str(), rc);
        return NVRTC_ERROR_COMPILATION;
    }
    uint64_t n = lib.size();
    p->image.assign(IMAGE_MAGIC, 8);
    p->image.append((const char*)&n, 8);
    p->image += lib;
    p->compiled = true;
    return NVRTC_SUCCESS;
}

}  // namespace

FAKE_API nvrtcResult nvrtcVersion(int* major, int* minor) {
    *major = 12;
    *minor = 9;
    return NVRTC_SUCCESS;
}

FAKE_API nvrtcResult nvrtcGetNumSupportedArchs(int* n) {
    *n = (int)(sizeof ARCHS / sizeof ARCHS[0]);
    return NVRTC_SUCCESS;
}

FAKE_API nvrtcResult nvrtcGetSupportedArchs(int* out) {
    memcpy(out, ARCHS, sizeof ARCHS);
    return NVRTC_SUCCESS;
}

FAKE_API const char* nvrtcGetErrorString(nvrtcResult r) {
    switch (r) {
        case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
        case NVRTC_ERROR_OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
        case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
        case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
        case NVRTC_ERROR_INVALID_OPTION: return "NVRTC_ERROR_INVALID_OPTION";
        case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
        default: return "NVRTC_ERROR_INTERNAL_ERROR";
    }
}

FAKE_API nvrtcResult nvrtcCreateProgram(void** prog, const char* src, const char* name, int num_headers,
                                        const char* const* headers, const char* const* include_names) {
    if (!prog || !src) return NVRTC_ERROR_INVALID_INPUT;
    if (num_headers != 0 || headers || include_names) return NVRTC_ERROR_INVALID_INPUT;  // unused by smelt
    Program* p = new Program;
    p->source = src;
    p->name = name ? name : "default_program";
    *prog = p;
    return NVRTC_SUCCESS;
}

FAKE_API nvrtcResult nvrtcDestroyProgram(void** prog) {
    if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
    delete (Program*)*prog;
    *prog = nullptr;
    return NVRTC_SUCCESS;
}

FAKE_API nvrtcResult nvrtcCompileProgram(void* prog, int num_options, const char* const* options) {
    Program* p = (Program*)prog;
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    int arch = 0;
    for (int i = 0; i < num_options; ++i) {
        const char* o = options[i];
        const char* v = nullptr;
        if (!strncmp(o, "--gpu-architecture=", 19)) v = o + 19;
        else if (!strncmp(o, "-arch=", 6)) v = o + 6;
        if (!v) continue;
        if (!strncmp(v, "sm_", 3)) p->ptx = false, arch = atoi(v + 3);
        else if (!strncmp(v, "compute_", 8)) p->ptx = true, arch = atoi(v + 8);
        else {
            p->log = format("fake NVRTC: unknown architecture %s", v);
            return NVRTC_ERROR_INVALID_OPTION;
        }
        bool known = false;
        for (int a : ARCHS) known |= a == arch;
        if (!known) {
            p->log = format("fake NVRTC: unsupported architecture %s", v);
            return NVRTC_ERROR_INVALID_OPTION;
        }
    }
    if (arch == 0) arch = 75;
    return compile(p, arch);
}

FAKE_API nvrtcResult nvrtcGetProgramLogSize(void* prog, size_t* n) {
    *n = ((Program*)prog)->log.size() + 1;
    return NVRTC_SUCCESS;
}

FAKE_API nvrtcResult nvrtcGetProgramLog(void* prog, char* out) {
    Program* p = (Program*)prog;
    memcpy(out, p->log.c_str(), p->log.size() + 1);
    return NVRTC_SUCCESS;
}

namespace {
std::string fake_ptx(const Program* p) {
    static const char* digits = "0123456789abcdef";
    std::string s = "// fake NVRTC output: the kernels built for the CPU, not PTX\n";
    s += PTX_MARKER;
    for (unsigned char c : p->image.substr(16)) {
        s += digits[c >> 4];
        s += digits[c & 15];
    }
    return s + "\n";
}
}  // namespace

FAKE_API nvrtcResult nvrtcGetPTXSize(void* prog, size_t* n) {
    Program* p = (Program*)prog;
    if (!p->compiled || !p->ptx) return NVRTC_ERROR_INVALID_INPUT;
    *n = fake_ptx(p).size() + 1;
    return NVRTC_SUCCESS;
}

FAKE_API nvrtcResult nvrtcGetPTX(void* prog, char* out) {
    Program* p = (Program*)prog;
    if (!p->compiled || !p->ptx) return NVRTC_ERROR_INVALID_INPUT;
    std::string s = fake_ptx(p);
    memcpy(out, s.c_str(), s.size() + 1);
    return NVRTC_SUCCESS;
}

FAKE_API nvrtcResult nvrtcGetCUBINSize(void* prog, size_t* n) {
    Program* p = (Program*)prog;
    if (!p->compiled || p->ptx) return NVRTC_ERROR_INVALID_INPUT;
    *n = p->image.size();
    return NVRTC_SUCCESS;
}

FAKE_API nvrtcResult nvrtcGetCUBIN(void* prog, char* out) {
    Program* p = (Program*)prog;
    if (!p->compiled || p->ptx) return NVRTC_ERROR_INVALID_INPUT;
    memcpy(out, p->image.data(), p->image.size());
    return NVRTC_SUCCESS;
}

#endif  // SMELT_FAKE_NVRTC

// ================================================================================ cuBLAS
#ifdef SMELT_FAKE_CUBLAS

typedef int cublasStatus_t;
enum : int {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

FAKE_API int smelt_fake_cuda_check_range(unsigned long long p, size_t bytes, char* why, size_t why_len);
FAKE_API int smelt_fake_cuda_enqueue(void* stream, void (*work)(void*), void* data);

namespace {

struct Handle {
    void* stream = nullptr;
    int math_mode = 0;
};

enum { R_32F = 0, R_64F = 1, R_16F = 2, R_16BF = 14 };
enum { COMPUTE_32F = 68, COMPUTE_64F = 70 };

int elem_size(int t) { return t == R_64F ? 8 : t == R_32F ? 4 : 2; }

float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                man <<= 1;
                ++e;
            } while (!(man & 1024));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 1023) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 112) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00;  // NaN
    if (ax >= 0x477ff000u) return sign | 0x7c00;  // rounds to infinity
    if (ax < 0x38800000u) {                        // subnormal or zero in half
        float a;
        memcpy(&a, &ax, 4);
        // a * 2^24 rounded to nearest even is the subnormal's integer significand.
        float s = a * 16777216.0f;
        uint32_t r = (uint32_t)__builtin_rintf(s);
        return sign | (uint16_t)r;
    }
    uint32_t rounded = ax + 0xfff + ((ax >> 13) & 1);  // round to nearest even at bit 13
    return sign | (uint16_t)((rounded - 0x38000000u) >> 13);
}

float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

double load(int t, const char* base, long long i) {
    switch (t) {
        case R_64F: {
            double v;
            memcpy(&v, base + i * 8, 8);
            return v;
        }
        case R_32F: {
            float v;
            memcpy(&v, base + i * 4, 4);
            return v;
        }
        default: {
            uint16_t v;
            memcpy(&v, base + i * 2, 2);
            return t == R_16F ? half_to_float(v) : bf16_to_float(v);
        }
    }
}

void store(int t, char* base, long long i, double v) {
    switch (t) {
        case R_64F: memcpy(base + i * 8, &v, 8); break;
        case R_32F: {
            float f = (float)v;
            memcpy(base + i * 4, &f, 4);
            break;
        }
        default: {
            uint16_t h = t == R_16F ? float_to_half((float)v) : float_to_bf16((float)v);
            memcpy(base + i * 2, &h, 2);
        }
    }
}

struct Gemm {
    int transa, transb, m, n, k, type, batch;
    double alpha, beta;
    const char *a, *b;
    char* c;
    int lda, ldb, ldc;
    long long sa, sb, sc;
};

void do_gemm(void* p) {
    Gemm* g = (Gemm*)p;
    for (int bt = 0; bt < g->batch; ++bt) {
        const char* a = g->a + bt * g->sa * elem_size(g->type);
        const char* b = g->b + bt * g->sb * elem_size(g->type);
        char* c = g->c + bt * g->sc * elem_size(g->type);
        for (int j = 0; j < g->n; ++j)
            for (int i = 0; i < g->m; ++i) {
                double acc64 = 0;
                float acc32 = 0;
                for (int q = 0; q < g->k; ++q) {
                    double x = load(g->type, a, g->transa ? q + (long long)i * g->lda : i + (long long)q * g->lda);
                    double y = load(g->type, b, g->transb ? j + (long long)q * g->ldb : q + (long long)j * g->ldb);
                    if (g->type == R_64F) acc64 += x * y;
                    else acc32 += (float)x * (float)y;
                }
                double r = g->type == R_64F ? acc64 : acc32;
                r *= g->alpha;
                // beta 0: C is not read (it may hold NaN), as cuBLAS documents.
                if (g->beta != 0) r += g->beta * load(g->type, c, i + (long long)j * g->ldc);
                store(g->type, c, i + (long long)j * g->ldc, r);
            }
    }
    delete g;
}

cublasStatus_t invalid(const std::string& why) {
    fprintf(stderr, "fake cuBLAS: cublasGemmStridedBatchedEx: %s\n", why.c_str());
    return CUBLAS_STATUS_INVALID_VALUE;
}

// The element span [first, last] of a column-major `rows x cols` matrix with leading dim `ld`.
long long span(int rows, int cols, int ld) { return (long long)(cols - 1) * ld + rows; }

}  // namespace

FAKE_API cublasStatus_t cublasCreate_v2(void** handle) {
    *handle = new Handle;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API cublasStatus_t cublasDestroy_v2(void* handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete (Handle*)handle;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API cublasStatus_t cublasSetStream_v2(void* handle, void* stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    ((Handle*)handle)->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API cublasStatus_t cublasSetMathMode(void* handle, int mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    ((Handle*)handle)->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API cublasStatus_t cublasGetVersion_v2(void* handle, int* version) {
    (void)handle;
    *version = 120900;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API cublasStatus_t cublasGemmStridedBatchedEx(
    void* handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* A,
    int atype, int lda, long long stride_a, const void* B, int btype, int ldb, long long stride_b,
    const void* beta, void* C, int ctype, int ldc, long long stride_c, int batch, int compute,
    int algo) {
    (void)algo;
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    Handle* h = (Handle*)handle;
    // The checks cuBLAS documents for CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED.
    if (m < 0 || n < 0 || k < 0 || batch < 0)
        return invalid(format("negative size: m %d, n %d, k %d, batch %d", m, n, k, batch));
    if ((transa != 0 && transa != 1) || (transb != 0 && transb != 1))
        return invalid(format("operation %d / %d (N = 0, T = 1)", transa, transb));
    auto at_least_one = [](int v) { return v > 1 ? v : 1; };
    if (lda < at_least_one(transa ? k : m))
        return invalid(format("lda %d < max(1, %s = %d)", lda, transa ? "k" : "m", transa ? k : m));
    if (ldb < at_least_one(transb ? n : k))
        return invalid(format("ldb %d < max(1, %s = %d)", ldb, transb ? "n" : "k", transb ? n : k));
    if (ldc < at_least_one(m)) return invalid(format("ldc %d < max(1, m = %d)", ldc, m));
    if (atype != btype || atype != ctype)
        return invalid(format("types %d, %d, %d differ", atype, btype, ctype));
    int want = atype == R_64F ? COMPUTE_64F : COMPUTE_32F;
    if ((atype != R_32F && atype != R_64F && atype != R_16F && atype != R_16BF) || compute != want) {
        fprintf(stderr, "fake cuBLAS: type %d with compute type %d is not supported\n", atype, compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!alpha || !beta || !A || !B || !C) return invalid("a null pointer");
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    const int size = elem_size(atype);
    // Every batch's operand spans inside device allocations, and C apart from A and B.
    const long long ea = k == 0 ? 0 : transa ? span(k, m, lda) : span(m, k, lda);
    const long long eb = k == 0 ? 0 : transb ? span(n, k, ldb) : span(k, n, ldb);
    const long long ec = span(m, n, ldc);
    char why[512];
    for (int bt = 0; bt < batch; ++bt) {
        const unsigned long long pa = (unsigned long long)A + bt * stride_a * size,
                                 pb = (unsigned long long)B + bt * stride_b * size,
                                 pc = (unsigned long long)C + bt * stride_c * size;
        if (ea && !smelt_fake_cuda_check_range(pa, ea * size, why, sizeof why))
            return invalid(format("batch %d of A: %s", bt, why));
        if (eb && !smelt_fake_cuda_check_range(pb, eb * size, why, sizeof why))
            return invalid(format("batch %d of B: %s", bt, why));
        if (!smelt_fake_cuda_check_range(pc, ec * size, why, sizeof why))
            return invalid(format("batch %d of C: %s", bt, why));
        auto overlap = [&](unsigned long long p, long long e) {
            return e && p < pc + ec * size && pc < p + e * size;
        };
        if (overlap(pa, ea) || overlap(pb, eb))
            return invalid(format("batch %d: C overlaps A or B", bt));
    }
    Gemm* g = new Gemm;
    g->transa = transa, g->transb = transb, g->m = m, g->n = n, g->k = k, g->type = atype;
    g->batch = batch;
    if (compute == COMPUTE_64F) {
        g->alpha = *(const double*)alpha;
        g->beta = *(const double*)beta;
    } else {
        g->alpha = *(const float*)alpha;
        g->beta = *(const float*)beta;
    }
    g->a = (const char*)A, g->b = (const char*)B, g->c = (char*)C;
    g->lda = lda, g->ldb = ldb, g->ldc = ldc, g->sa = stride_a, g->sb = stride_b, g->sc = stride_c;
    return smelt_fake_cuda_enqueue(h->stream, do_gemm, g) == 0 ? CUBLAS_STATUS_SUCCESS
                                                               : CUBLAS_STATUS_EXECUTION_FAILED;
}

#endif  // SMELT_FAKE_CUBLAS
