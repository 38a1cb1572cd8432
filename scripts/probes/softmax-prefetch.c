/*
 * CPU probe behind the row-prefetch placement of codegen/src/llvm/kernel/prefetch.rs
 * (thirtieth session, BENCHMARKS.md): softmax over 65536 x 768 floats, written by hand with
 * AVX-512 intrinsics in the shape smelt's row kernel has (a max pass, an exp-and-sum pass into
 * a stack row, a normalising pass with streaming stores; the exp is smelt's polynomial form,
 * op for op, with rough coefficients: only the time matters here), on two OpenMP threads,
 * with the row prefetches in different places:
 *
 *   current    the max pass prefetches two rows ahead (what smelt did before)
 *   pipelined  the exp pass of row r also loads row r+1 and computes its max
 *   exp-pf+N   only the exp pass prefetches, N rows ahead
 *   both+2     both passes prefetch two rows ahead
 *   burst+2    the row two ahead prefetched in one burst before the max pass
 *   no-exp     the exp left out (the memory side alone)
 *
 * Build and run (x86-64 with AVX-512, gcc):
 *   gcc -O2 -march=native -fopenmp scripts/probes/softmax-prefetch.c -o /tmp/sm -lm
 *   OMP_NUM_THREADS=2 OMP_PROC_BIND=true /tmp/sm
 * Each line: the median of nine calls.
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include <omp.h>
#include <sys/mman.h>
#define COLS 768
#define NV (COLS/16)
static double now(){struct timespec a; clock_gettime(CLOCK_MONOTONIC,&a); return a.tv_sec+a.tv_nsec*1e-9;}
static inline __m512 exp16(__m512 x){
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.f));
  x = _mm512_min_ps(x, _mm512_set1_ps(104.f));
  __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504f), _mm512_set1_ps(12582912.f));
  __m512 n = _mm512_add_ps(z, _mm512_set1_ps(-12582912.f));
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145752f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.42860677e-06f), r);
  __m512 p = _mm512_set1_ps(1.3888e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.666e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}
static inline float hmax(__m512 v){return _mm512_reduce_max_ps(v);}
static inline float hsum(__m512 v){return _mm512_reduce_add_ps(v);}
// mode 0: current schedule; 1: pipelined (max of next row inside exp loop); 2: no exp (memory probe)
static void run(const float*x, float*y, long rows, int mode, int pf){
  #pragma omp parallel
  {
    int t=omp_get_thread_num(), nt=omp_get_num_threads();
    long r0=rows*t/nt, r1=rows*(t+1)/nt;
    __attribute__((aligned(64))) float buf[COLS];
    if(mode==1){
      // prologue: max of row r0
      __m512 m=_mm512_set1_ps(-INFINITY);
      for(int v=0;v<NV;v++) m=_mm512_max_ps(m,_mm512_loadu_ps(x+r0*COLS+v*16));
      float mx=hmax(m);
      for(long r=r0;r<r1;r++){
        const float*xr=x+r*COLS; const float*xn=x+(r+1<r1? r+1:r)*COLS;
        __m512 mb=_mm512_set1_ps(mx), s=_mm512_setzero_ps(), m2=_mm512_set1_ps(-INFINITY);
        for(int v=0;v<NV;v++){
          if(pf) _mm_prefetch((const char*)(xn+COLS+v*16), _MM_HINT_T0);
          m2=_mm512_max_ps(m2,_mm512_loadu_ps(xn+v*16));
          __m512 e=exp16(_mm512_sub_ps(_mm512_loadu_ps(xr+v*16),mb));
          _mm512_store_ps(buf+v*16,e); s=_mm512_add_ps(s,e);
        }
        float inv=1.f/hsum(s); __m512 ib=_mm512_set1_ps(inv);
        for(int v=0;v<NV;v++) _mm512_stream_ps(y+r*COLS+v*16,_mm512_mul_ps(_mm512_load_ps(buf+v*16),ib));
        mx=hmax(m2);
      }
    } else {
      for(long r=r0;r<r1;r++){
        const float*xr=x+r*COLS;
        __m512 m=_mm512_set1_ps(-INFINITY);
        int mp = mode==5 ? 1 : mode==7 ? 2 : mode>=3 ? 0 : 2; if(mode==8&&pf) for(int v=0;v<NV;v++) _mm_prefetch((const char*)(xr+2*COLS+v*16), _MM_HINT_T0); int ep = mode==3 ? 1 : mode==4 ? 2 : mode==6 ? 3 : mode==7 ? 2 : 0;
        for(int v=0;v<NV;v++){ if(pf&&mp) _mm_prefetch((const char*)(xr+mp*COLS+v*16), _MM_HINT_T0); m=_mm512_max_ps(m,_mm512_loadu_ps(xr+v*16)); }
        __m512 mb=_mm512_set1_ps(hmax(m)), s=_mm512_setzero_ps();
        for(int v=0;v<NV;v++){
          if(pf&&ep) _mm_prefetch((const char*)(xr+ep*COLS+v*16), _MM_HINT_T0);
          __m512 d=_mm512_sub_ps(_mm512_loadu_ps(xr+v*16),mb);
          __m512 e= mode==2? d : exp16(d);
          _mm512_store_ps(buf+v*16,e); s=_mm512_add_ps(s,e);
        }
        float inv=1.f/hsum(s); __m512 ib=_mm512_set1_ps(inv);
        for(int v=0;v<NV;v++) _mm512_stream_ps(y+r*COLS+v*16,_mm512_mul_ps(_mm512_load_ps(buf+v*16),ib));
      }
    }
  }
}
static void* big(size_t n){ void*p=mmap(0,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(p,n,MADV_HUGEPAGE); return p;}
int main(int argc,char**argv){
  long rows=65536; size_t n=rows*COLS;
  float*x=big(n*4),*y=big(n*4);
  for(size_t i=0;i<n;i++) x[i]=(float)((i*7919)%2003)/500.f-2.f;
  memset(y,0,n*4);
  const char* names[]={"current","pipelined","no-exp","exp-pf+1","exp-pf+2","max-pf+1","exp-pf+3","both+2","burst+2"};
  for(int round=0;round<3;round++) for(int pf=1;pf>=1;pf--) for(int mode=0;mode<9;mode++){
    run(x,y,rows,mode,pf);
    double best=1e9; double ts[9];
    for(int k=0;k<9;k++){double t0=now(); run(x,y,rows,mode,pf); ts[k]=now()-t0;}
    // median
    for(int i=0;i<9;i++)for(int j=i+1;j<9;j++) if(ts[j]<ts[i]){double q=ts[i];ts[i]=ts[j];ts[j]=q;}
    printf("%-10s pf=%d %.2f ms %.1f GB/s\n",names[mode],pf,ts[4]*1e3, 2.0*n*4/ts[4]/1e9);
  }
  printf("%f\n",y[12345]);
}
