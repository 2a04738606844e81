// Times cblas_sgemm of three BLAS libraries on the matrix products of the
// 21.7M learner step (learner/trainer's BenchmarkStepVsPyTorch shape: 1024
// tokens, width 384, MLP 1024, q/k/v 1152, vocabulary 32,000; forward
// X.W^T, input gradient dY.W, weight gradient dY^T.X), one thread each,
// alternated, the fastest of two rounds: Debian's OpenBLAS (the one aipo
// links), PyPI's scipy-openblas32 (a newer OpenBLAS) and PyPI's mkl
// (sequential). Built and run by scripts/gemmlibs/run.sh, which passes the
// libraries' paths.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef void (*sgemm_t)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
enum {RowMajor=101, NoTrans=111, Trans=112};
int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: gemmlibs DEBIAN_OPENBLAS SCIPY_OPENBLAS MKL_RT\n");
    return 2;
  }
  const char *libs[][3] = {
    {"debian openblas", argv[1], "cblas_sgemm"},
    {"scipy-openblas32", argv[2], "scipy_cblas_sgemm"},
    {"mkl sequential", argv[3], "cblas_sgemm"},
  };
  sgemm_t f[3];
  for (int l = 0; l < 3; l++) {
    void *h = dlopen(libs[l][1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("%s: %s\n", libs[l][0], dlerror()); return 1; }
    f[l] = (sgemm_t)dlsym(h, libs[l][2]);
    void (*nt)(int) = (void (*)(int))dlsym(h, l == 1 ? "scipy_openblas_set_num_threads" : l == 0 ? "openblas_set_num_threads" : "MKL_Set_Num_Threads");
    if (nt) nt(1);
  }
  // M N K ta tb: forward X·Wᵀ, backward dY·W, weight gradient dYᵀ·X
  int sh[][5] = {{1024,1152,384,0,1},{1024,384,1152,0,0},{1152,384,1024,1,0},
                 {1024,2048,384,0,1},{1024,384,2048,0,0},{2048,384,1024,1,0},
                 {1024,384,1024,0,1},{1024,1024,384,0,0},{384,1024,1024,1,0},
                 {1024,32000,384,0,1},{1024,384,32000,0,0},{32000,384,1024,1,0}};
  double tot[3] = {0};
  for (int s = 0; s < 12; s++) {
    int M = sh[s][0], N = sh[s][1], K = sh[s][2], ta = sh[s][3], tb = sh[s][4];
    float *A = malloc(4L*M*K), *B = malloc(4L*N*K), *C = malloc(4L*M*N);
    for (long i = 0; i < (long)M*K; i++) A[i] = (i%7)*0.1f;
    for (long i = 0; i < (long)N*K; i++) B[i] = (i%5)*0.1f;
    int lda = ta ? M : K, ldb = tb ? K : N, reps = (double)M*N*K > 5e9 ? 3 : 12;
    printf("M=%5d N=%5d K=%5d %c%c:", M, N, K, ta?'T':'N', tb?'T':'N');
    double t[3] = {0};
    for (int round = 0; round < 2; round++)
      for (int l = 0; l < 3; l++) {
        f[l](RowMajor, ta?Trans:NoTrans, tb?Trans:NoTrans, M, N, K, 1, A, lda, B, ldb, 0, C, N);
        double t0 = now();
        for (int r = 0; r < reps; r++) f[l](RowMajor, ta?Trans:NoTrans, tb?Trans:NoTrans, M, N, K, 1, A, lda, B, ldb, 0, C, N);
        double d = (now()-t0)/reps;
        if (round == 0 || d < t[l]) t[l] = d;
      }
    for (int l = 0; l < 3; l++) { printf("  %s %.0f GF/s", l==0?"deb":l==1?"sob":"mkl", 2.0*M*N*K/t[l]/1e9); tot[l] += t[l]; }
    printf("\n");
    free(A); free(B); free(C);
  }
  printf("sum of one call each: debian %.1f ms, scipy-openblas %.1f ms, mkl %.1f ms\n", tot[0]*1e3, tot[1]*1e3, tot[2]*1e3);
}
