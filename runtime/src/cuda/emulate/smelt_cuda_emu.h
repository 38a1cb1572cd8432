// smelt_cuda_emu.h: runs smelt's generated CUDA C on the CPU, with CUDA's thread model.
//
// Part of smelt-runtime (runtime/src/cuda/emulate.rs writes it next to the translation unit and
// compiles both with the host C++ compiler). Not a general CUDA emulator: it provides exactly
// what smelt's code generator and fallback GEMM emit (see codegen/src/cuda/prelude.rs):
//
// - every thread of a block is a fiber on the calling OS thread (a 20-instruction stack switch
//   on x86-64 ELF, ucontext elsewhere or with -DSMELT_EMU_UCONTEXT), starting in CUDA's
//   floating-point environment; the blocks of a grid run one after another, in blockIdx order;
// - `__shared__` variables are function statics per OS thread, which is per block because
//   one block runs at a time on a thread;
// - `__syncthreads()` parks a thread until every thread of the block is parked at one;
// - `__shfl_xor_sync` with the full mask parks a lane until all 32 lanes of its warp are at a
//   shuffle, then each reads its partner's value;
// - warps run one at a time between barriers, in alternating order (see run_block), so a
//   missing __syncthreads changes results;
// - a barrier or shuffle that can never complete (a thread exited while others wait, lanes
//   of one warp at different kinds of barrier, a partial warp shuffling with the full mask) is
//   reported as an error naming the threads and source lines, where a GPU would hang or be
//   undefined; so is a misaligned typed access (-fsanitize=alignment, handler below);
// - `+ - * /` with explicit rounding are the host's IEEE operations (the TU is compiled with
//   -ffp-contract=off); `expf`, `tanhf`, `erff`, … are the host C library's, which may differ
//   from CUDA's by an ulp or two.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static thread_local

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
};

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

static inline float __int_as_float(int x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}
static inline int __float_as_int(float x) {
    int i;
    memcpy(&i, &x, 4);
    return i;
}
static inline double __longlong_as_double(long long x) {
    double d;
    memcpy(&d, &x, 8);
    return d;
}
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }

// The fibers of a block share one OS thread, but kernels of one module may run on several
// (streams of the fake driver, fake_cuda.cpp), so the read-modify-write is a real atomic.
static inline unsigned int atomicOr(unsigned int* p, unsigned int v) {
    return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}

namespace smelt_emu {

#if defined(__x86_64__) && defined(__ELF__) && !defined(SMELT_EMU_UCONTEXT)
// switch_stack(&from, to): pushes the callee-saved registers, MXCSR and the x87 control word
// (what the SysV ABI says a call preserves), saves the stack pointer in `from`, then pops the
// same from stack `to` and returns into that context. No system call, unlike swapcontext.
extern "C" void smelt_emu_switch_stack(void** from, void* to);
asm(R"(
    .pushsection .text
    .p2align 4
    .type smelt_emu_switch_stack,@function
smelt_emu_switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size smelt_emu_switch_stack, .-smelt_emu_switch_stack
    .popsection
)");

struct Context {
    void* sp;
};
inline void switch_to(Context& from, Context& to) { smelt_emu_switch_stack(&from.sp, to.sp); }
// A context that starts `entry` (which must never return) on `stack`.
inline void start_context(Context& c, char* stack, size_t size, Context&, void (*entry)()) {
    uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
    void** frame = (void**)(top - 16);  // the return address: `entry` then sees rsp = 8 mod 16
    frame[0] = (void*)entry;
    frame[1] = nullptr;
    for (int r = 1; r <= 6; ++r) frame[-r] = nullptr;  // rbp, rbx, r12-r15
    uint32_t* control = (uint32_t*)(frame - 7);
    control[0] = 0x1f80;  // MXCSR and x87 control word: the ABI's defaults (thread_main sets
    control[1] = 0x037f;  // them again for the ucontext path)
    c.sp = frame - 7;
}
#else
struct Context {
    ucontext_t uc;
};
inline void switch_to(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void start_context(Context& c, char* stack, size_t size, Context& back, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = &back.uc;
    makecontext(&c.uc, entry, 0);
}
#endif

enum State { READY, AT_SYNCTHREADS, AT_SHUFFLE, DONE, FAULTED };

struct Thread {
    Context ctx;
    State state;
    int line;  // the source line of the barrier or shuffle it waits at
    uint64_t value;  // the value this lane offers at a shuffle, then the value it receives
    int lane_mask;   // the xor of the shuffle it waits at
};

struct Block {
    Thread* threads = nullptr;
    size_t n = 0;
    char* stacks = nullptr;
    Context scheduler;
    unsigned current = 0;
    void (*body)(void*) = nullptr;
    void* closure = nullptr;
};

inline thread_local Block* running = nullptr;
// Why the last launch failed (NUL-terminated).
inline thread_local char last_error[512];
// What stopped a thread that hit a fault (a misaligned access, a shuffle with a partial mask).
inline thread_local char fault[256];

#define SMELT_EMU_ERROR(buf, ...) snprintf((buf), sizeof(buf), __VA_ARGS__)

constexpr size_t STACK_BYTES = 64 * 1024;

// Back to the scheduler, waiting at source line `line`; returns when this thread may go on.
inline void park(State why, int line = 0) {
    Block* b = running;
    Thread& t = b->threads[b->current];
    t.state = why;
    t.line = line;
    switch_to(t.ctx, b->scheduler);
}

// Stops the calling thread for good after a fault (its stack is abandoned: kernels hold no
// resources); the launch fails with the message in `fault`.
[[noreturn]] inline void trap() {
    park(FAULTED);
    __builtin_unreachable();
}

[[noreturn]] inline void thread_main() {
#if defined(__x86_64__)
    // The kernels' floating-point environment is CUDA's (round to nearest, subnormals kept),
    // whatever the calling thread set (flush-to-zero, say).
    __builtin_ia32_ldmxcsr(0x1f80);
    const unsigned short x87 = 0x037f;
    asm volatile("fldcw %0" : : "m"(x87));
#endif
    Block* b = running;
    b->body(b->closure);
    park(DONE);  // never resumed
    __builtin_unreachable();
}

inline const char* state_name(State s) {
    switch (s) {
        case READY: return "running";
        case AT_SYNCTHREADS: return "at __syncthreads";
        case AT_SHUFFLE: return "at a warp shuffle";
        case DONE: return "exited";
        case FAULTED: return "faulted";
    }
    return "?";
}

// "0-31 at a warp shuffle (line 120), 32-63 exited" into `out` (truncated to `cap` bytes).
inline void describe(const Block& b, char* out, size_t cap) {
    size_t n = b.n, i = 0, used = 0;
    out[0] = 0;
    auto same = [&](size_t x, size_t y) {
        return b.threads[x].state == b.threads[y].state &&
               (b.threads[x].state == DONE || b.threads[x].line == b.threads[y].line);
    };
    while (i < n && used + 1 < cap) {
        size_t j = i;
        while (j + 1 < n && same(j + 1, i)) ++j;
        const Thread& t = b.threads[i];
        char at[32] = "";
        if (t.state == AT_SYNCTHREADS || t.state == AT_SHUFFLE)
            snprintf(at, sizeof at, " (line %d)", t.line);
        int w = snprintf(out + used, cap - used, "%s%zu-%zu %s%s", used ? ", " : "", i, j,
                         state_name(t.state), at);
        if (w < 0) break;
        used += (size_t)w;
        i = j + 1;
    }
}

// Runs the lanes of the warp starting at thread `w` until none can go on by itself: each runs
// to its next barrier, and a shuffle is released as soon as all 32 lanes are at one. Sets
// `progressed` when a lane ran. Returns false (with last_error set) on a fault or a shuffle in
// a partial warp.
inline bool run_warp(Block& b, size_t w, bool& progressed) {
    const size_t end = w + 32 < b.n ? w + 32 : b.n;
    for (;;) {
        for (size_t i = w; i < end; ++i) {
            if (b.threads[i].state != READY) continue;
            b.current = (unsigned)i;
            threadIdx = uint3{(unsigned)i, 0, 0};
            switch_to(b.scheduler, b.threads[i].ctx);
            progressed = true;
            if (b.threads[i].state == FAULTED) {
                SMELT_EMU_ERROR(last_error, "%s", fault);
                fault[0] = 0;
                return false;
            }
        }
        size_t shuffling = 0;
        for (size_t i = w; i < end; ++i) shuffling += b.threads[i].state == AT_SHUFFLE;
        if (shuffling == 0) return true;
        if (end - w != 32) {
            SMELT_EMU_ERROR(last_error,
                            "a full-mask warp shuffle (line %d) in a partial warp of %zu "
                            "threads (block %u)",
                            b.threads[w].line, end - w, blockIdx.x);
            return false;
        }
        if (shuffling != 32) return true;  // the block decides whether the rest can come
        uint64_t offered[32];
        for (size_t l = 0; l < 32; ++l) offered[l] = b.threads[w + l].value;
        for (size_t l = 0; l < 32; ++l) {
            Thread& t = b.threads[w + l];
            t.value = offered[l ^ (size_t)(t.lane_mask & 31)];
            t.state = READY;
        }
    }
}

// Runs every thread of the current block to its end. Returns false (with last_error set) when
// a barrier can never complete.
//
// Warps run one at a time, each as far as it can go before the block's next __syncthreads, in
// ascending order between even-numbered barriers and descending order between odd-numbered
// ones: CUDA orders warps only at barriers, and letting one warp run ahead of the others makes
// a missing __syncthreads (a warp reading shared memory another has not written yet, or
// overwriting what another has not read yet) give wrong results instead of passing by luck.
inline bool run_block(Block& b) {
    const size_t n = b.n, warps = (n + 31) / 32;
    for (size_t phase = 0;; ++phase) {
        bool progressed = false;
        for (size_t k = 0; k < warps; ++k) {
            const size_t w = (phase % 2 == 0 ? k : warps - 1 - k) * 32;
            if (!run_warp(b, w, progressed)) return false;
        }
        size_t live = 0, at_sync = 0;
        for (size_t i = 0; i < n; ++i) {
            live += b.threads[i].state != DONE;
            at_sync += b.threads[i].state == AT_SYNCTHREADS;
        }
        if (live == 0) return true;
        if (at_sync == n) {
            for (size_t i = 0; i < n; ++i) b.threads[i].state = READY;
            continue;
        }
        if (!progressed) {
            char who[256];
            describe(b, who, sizeof who);
            SMELT_EMU_ERROR(last_error,
                            "block %u of %u cannot go on (a GPU would hang or be undefined "
                            "here): threads %s",
                            blockIdx.x, gridDim.x, who);
            return false;
        }
        --phase;  // not a barrier: the same order again
    }
}

template <typename T>
T arg_from(void* p) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "kernel argument");
    T v;
    memcpy(&v, p, sizeof(T));
    return v;
}

template <typename... A>
struct Launch {
    void (*kernel)(A...);
    void** args;
    template <size_t... I>
    void call_with(std::index_sequence<I...>) {
        kernel(arg_from<A>(args[I])...);
    }
    static void call(void* self) {
        static_cast<Launch*>(self)->call_with(std::index_sequence_for<A...>{});
    }
};

// Runs kernel `k` over `grid` blocks of `block` threads; `args[i]` points at argument i (as
// for cuLaunchKernel). Returns 0, or 1 with the reason in last_error.
template <typename... A>
int launch(void (*k)(A...), unsigned grid, unsigned block, void** args) {
    if (block == 0 || block > 1024 || grid == 0) {
        SMELT_EMU_ERROR(last_error, "a launch of %u blocks of %u threads", grid, block);
        return 1;
    }
    Launch<A...> l{k, args};
    Block b;
    b.n = block;
    b.threads = static_cast<Thread*>(calloc(block, sizeof(Thread)));
    b.stacks = static_cast<char*>(malloc(STACK_BYTES * block));
    if (!b.threads || !b.stacks) {
        free(b.threads);
        free(b.stacks);
        SMELT_EMU_ERROR(last_error, "out of memory for %u threads", block);
        return 1;
    }
    b.body = &Launch<A...>::call;
    b.closure = &l;
    Block* outer = running;
    running = &b;
    gridDim = dim3{grid, 1, 1};
    blockDim = dim3{block, 1, 1};
    int rc = 0;
    for (unsigned g = 0; g < grid && rc == 0; ++g) {
        blockIdx = uint3{g, 0, 0};
        for (unsigned i = 0; i < block; ++i) {
            Thread& t = b.threads[i];
            start_context(t.ctx, b.stacks + STACK_BYTES * i, STACK_BYTES, b.scheduler,
                          thread_main);
            t.state = READY;
        }
        if (!run_block(b)) rc = 1;
    }
    running = outer;
    free(b.threads);
    free(b.stacks);
    return rc;
}

template <typename T>
T shuffle_xor(T v, int lane_mask, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffled value");
    Block* b = running;
    Thread& t = b->threads[b->current];
    t.value = 0;
    memcpy(&t.value, &v, sizeof(T));
    t.lane_mask = lane_mask;
    park(AT_SHUFFLE, line);
    T r;
    memcpy(&r, &b->threads[b->current].value, sizeof(T));
    return r;
}

}  // namespace smelt_emu

// Both record the caller's source line for the diagnostics.
#define __syncthreads() smelt_emu::park(smelt_emu::AT_SYNCTHREADS, __LINE__)
#define __shfl_xor_sync(...) smelt_emu::shfl_xor_sync(__LINE__, __VA_ARGS__)

namespace smelt_emu {
template <typename T>
static inline T shfl_xor_sync(int line, unsigned mask, T v, int lane_mask, int width = 32) {
    if (mask != 0xffffffffu || width != 32) {
        SMELT_EMU_ERROR(smelt_emu::fault,
                        "__shfl_xor_sync with a mask or width other than the full warp (line "
                        "%d, thread %u of block %u)",
                        line, threadIdx.x, blockIdx.x);
        smelt_emu::trap();
    }
    return smelt_emu::shuffle_xor(v, lane_mask, line);
}
}  // namespace smelt_emu

namespace smelt_emu {
// Copies kernel `k`'s arguments (`args[i]` points at argument i) into 8-byte `slots`, as
// cuLaunchKernel copies them before it returns; sets bit i of `*pointers` when argument i is a
// pointer. Returns the argument count (at most 64).
template <typename... A>
unsigned pack(void (*)(A...), void** args, unsigned long long* slots,
              unsigned long long* pointers) {
    static_assert(sizeof...(A) <= 64, "kernel arguments");
    unsigned i = 0;
    *pointers = 0;
    ((memcpy(&slots[i], args[i], sizeof(A)),
      *pointers |= std::is_pointer<A>::value ? 1ull << i : 0ull, ++i),
     ...);
    return i;
}
}  // namespace smelt_emu

// One exported entry per kernel: `smelt_emu_<name>(grid, block, args)` runs it, and
// `smelt_emu_pack_<name>(args, slots, pointers)` copies its arguments (smelt_emu::pack).
#define SMELT_EMU_ENTRY(name)                                                         \
    extern "C" __attribute__((visibility("default"))) int smelt_emu_##name(         \
        unsigned grid, unsigned block, void** args) {                                 \
        return smelt_emu::launch(name, grid, block, args);                            \
    }                                                                                 \
    extern "C" __attribute__((visibility("default"))) unsigned smelt_emu_pack_##name( \
        void** args, unsigned long long* slots, unsigned long long* pointers) {       \
        return smelt_emu::pack(name, args, slots, pointers);                          \
    }

// Misaligned accesses. The translation unit is compiled with -fsanitize=alignment, and this
// handler stands in for the UBSan runtime: a typed access at an address its type's alignment
// does not divide (a 16-byte pack at an address that is not a multiple of 16, which is a
// "misaligned address" fault on a GPU) becomes the launch's error instead of going unnoticed
// on a CPU that tolerates it.
struct SmeltEmuSourceLocation {
    const char* file;
    uint32_t line, column;
};
struct SmeltEmuTypeMismatch {
    SmeltEmuSourceLocation location;
    const void* type;
    unsigned char log_alignment;
    unsigned char kind;
};
extern "C" __attribute__((visibility("default"))) void __ubsan_handle_type_mismatch_v1(
    SmeltEmuTypeMismatch* data, uintptr_t address) {
    static const char* kinds[] = {"load", "store", "reference binding", "member access",
                                  "member call"};
    SMELT_EMU_ERROR(smelt_emu::fault,
                    "misaligned %s of a %u-byte-aligned type at address %#llx (thread %u of "
                    "block %u), line %u of the translation unit",
                    data->kind < 5 ? kinds[data->kind] : "access", 1u << data->log_alignment,
                    (unsigned long long)address, threadIdx.x, blockIdx.x,
                    data->location.line);
    // The access itself may use an aligned instruction that would fault on the CPU too.
    if (smelt_emu::running) smelt_emu::trap();
}

// The address of the status word of range-checked accesses, when the prelude declares it.
#define SMELT_EMU_STATUS(word)                                                        \
    extern "C" __attribute__((visibility("default"))) unsigned int* smelt_emu_status() { \
        return &word;                                                                 \
    }

// A module-scope `__device__` variable, for cuModuleGetGlobal: its address and size.
#define SMELT_EMU_GLOBAL(var)                                                         \
    extern "C" __attribute__((visibility("default"))) void* smelt_emu_global_##var(  \
        unsigned long long* bytes) {                                                  \
        *bytes = sizeof(var);                                                         \
        return (void*)&var;                                                           \
    }

extern "C" __attribute__((visibility("default"))) const char* smelt_emu_last_error() {
    return smelt_emu::last_error;
}
