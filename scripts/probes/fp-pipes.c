// Which execution pipes AVX-512 floating-point instructions share, from their throughput
// alone (no performance counters needed): a loop of 8 independent instructions of one kind,
// then 8 of one kind plus 8 of another. Two kinds that run on different pipes take as long
// together as the slower alone; kinds that share pipes add up. Used for BENCHMARKS.md
// ("The AMD EPYC host after five sessions on the Intel one").
//
//   gcc -O2 -mavx512f scripts/probes/fp-pipes.c -o /tmp/fp-pipes && /tmp/fp-pipes 3.65
//
// The argument is the core clock in GHz (measure it, e.g. with a chain of dependent imul),
// to print cycles per loop iteration.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define FMA8                                                                             \
  "vfmadd231ps %%zmm0,%%zmm1,%%zmm2\n vfmadd231ps %%zmm0,%%zmm1,%%zmm3\n"                \
  "vfmadd231ps %%zmm0,%%zmm1,%%zmm4\n vfmadd231ps %%zmm0,%%zmm1,%%zmm5\n"                \
  "vfmadd231ps %%zmm0,%%zmm1,%%zmm6\n vfmadd231ps %%zmm0,%%zmm1,%%zmm7\n"                \
  "vfmadd231ps %%zmm0,%%zmm1,%%zmm8\n vfmadd231ps %%zmm0,%%zmm1,%%zmm9\n"
#define X8(op)                                                                           \
  op " %%zmm0,%%zmm1,%%zmm10\n" op " %%zmm0,%%zmm1,%%zmm11\n" op " %%zmm0,%%zmm1,%%zmm12\n" \
  op " %%zmm0,%%zmm1,%%zmm13\n" op " %%zmm0,%%zmm1,%%zmm14\n" op " %%zmm0,%%zmm1,%%zmm15\n" \
  op " %%zmm0,%%zmm1,%%zmm16\n" op " %%zmm0,%%zmm1,%%zmm17\n"
#define CMP4 "vcmpunordps %%zmm0,%%zmm1,%%k1\n vcmpunordps %%zmm0,%%zmm1,%%k1\n" \
             "vcmpunordps %%zmm0,%%zmm1,%%k1\n vcmpunordps %%zmm0,%%zmm1,%%k1\n"
#define CLOBBER "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
                "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "k1"
#define RUN(name, body)                                                                  \
  {                                                                                      \
    long n = 20000000;                                                                   \
    double best = 1e9;                                                                   \
    for (int r = 0; r < 3; r++) {                                                        \
      double t0 = now();                                                                 \
      for (long i = 0; i < n; i++) __asm__ volatile(body ::: CLOBBER);                   \
      double t = now() - t0;                                                             \
      if (t < best) best = t;                                                            \
    }                                                                                    \
    printf("%-24s %5.2f cycles per iteration\n", name, best * ghz * 1e9 / n);           \
  }

int main(int argc, char **argv) {
  double ghz = argc > 1 ? atof(argv[1]) : 3.0;
  __asm__ volatile("vxorps %%zmm0,%%zmm0,%%zmm0\n vxorps %%zmm1,%%zmm1,%%zmm1" ::: "xmm0", "xmm1");
  RUN("8 fma", FMA8)
  RUN("8 add", X8("vaddps"))
  RUN("8 mul", X8("vmulps"))
  RUN("8 max", X8("vmaxps"))
  RUN("8 scalef", X8("vscalefps"))
  RUN("8 fma + 8 add", FMA8 X8("vaddps"))
  RUN("8 fma + 8 mul", FMA8 X8("vmulps"))
  RUN("8 fma + 8 max", FMA8 X8("vmaxps"))
  RUN("8 fma + 8 scalef", FMA8 X8("vscalefps"))
  RUN("8 add + 8 scalef", X8("vaddps") X8("vscalefps"))
  RUN("8 add + 8 max", X8("vaddps") X8("vmaxps"))
  RUN("8 fma + 4 cmpunord", FMA8 CMP4)
  RUN("8 fma + 8 paddd", FMA8 X8("vpaddd"))
  RUN("8 add + 8 paddd", X8("vaddps") X8("vpaddd"))
  return 0;
}
