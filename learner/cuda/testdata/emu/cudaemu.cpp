// The scheduler of cudaemu.h: blocks one after another, a block's threads
// as fibers that yield whenever they wait at a barrier (__syncthreads for
// the block, the shuffles for their warp).
//
// A fiber switch is the emulator's inner loop: every thread of every
// block starts and ends with one, and each barrier costs two more. On
// x86-64 the switch is the few instructions below, which save and restore
// the callee-saved registers and the stack pointer; elsewhere it is
// ucontext's swapcontext, which also saves the signal mask with a system
// call each time (several times slower on the small kernels' blocks).
#include "cudaemu.h"

#include <pthread.h>
#include <ucontext.h>

#include <vector>

emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

// The kernel table, from the registry the test generates.
extern const emu_entry emu_kernels[];
extern const int emu_nkernels;

static const size_t kStack = 128 * 1024;
static std::vector<char> stacks;
static std::vector<char> finished;
static int cur;
static const emu_invoker_t *run;
static void **params;
static std::vector<double> slots;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void fiber_main();

#if defined(__x86_64__)
// emu_switch saves the callee-saved registers on the current stack, its
// stack pointer in *save, and resumes the fiber whose stack pointer is to
// (saved by emu_switch or emu_start). emu_start does the same, then calls
// fn on the new stack top (16-byte aligned); fn never returns.
extern "C" void emu_switch(void **save, void *to) __attribute__((visibility("hidden")));
extern "C" void emu_start(void **save, void *top, void (*fn)()) __attribute__((visibility("hidden")));
asm(R"(
  .text
  .p2align 4
  .globl emu_switch
  .hidden emu_switch
  .type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch

  .p2align 4
  .globl emu_start
  .hidden emu_start
  .type emu_start, @function
emu_start:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  callq *%rdx
  ud2
  .size emu_start, .-emu_start
)");

static void *sched_sp;
static std::vector<void *> fiber_sp;

static void yield_() { emu_switch(&fiber_sp[cur], sched_sp); }

// fiber_entry runs a thread to its end and returns to the scheduler for
// good (nothing resumes a finished fiber).
static void fiber_entry() {
  fiber_main();
  void *dead;
  emu_switch(&dead, sched_sp);
}

static void fibers_init(int n) { fiber_sp.assign(n, nullptr); }

// resume runs thread t until it waits or ends: from the top of its stack
// the first time, else from where it yielded.
static void resume(int t) {
  if (fiber_sp[t])
    emu_switch(&sched_sp, fiber_sp[t]);
  else
    emu_start(&sched_sp, stacks.data() + (size_t)(t + 1) * kStack, fiber_entry);
}
#else
static ucontext_t sched;
static std::vector<ucontext_t> fibers;

static void yield_() { swapcontext(&fibers[cur], &sched); }

static void fibers_init(int n) {
  fibers.resize(n);
  for (int t = 0; t < n; t++) {
    getcontext(&fibers[t]);
    fibers[t].uc_stack.ss_sp = stacks.data() + (size_t)t * kStack;
    fibers[t].uc_stack.ss_size = kStack;
    fibers[t].uc_link = &sched;  // returning resumes the scheduler
    makecontext(&fibers[t], fiber_main, 0);
  }
}

static void resume(int t) { swapcontext(&sched, &fibers[t]); }
#endif

// Barriers: a count of arrivals and a generation that advances when every
// live thread of the block (or of the warp) has arrived. A thread that
// ends releases a barrier the others already wait at, as on the GPU,
// where exited threads no longer take part.
static int live, bar_count, bar_gen;
static std::vector<int> warp_live, warp_count, warp_gen;

static void release_if_complete(int w) {
  if (bar_count > 0 && bar_count == live) {
    bar_count = 0;
    bar_gen++;
  }
  if (warp_count[w] > 0 && warp_count[w] == warp_live[w]) {
    warp_count[w] = 0;
    warp_gen[w]++;
  }
}

static void fiber_main() {
  (*run)(params);
  finished[cur] = 1;
  live--;
  warp_live[cur / 32]--;
  release_if_complete(cur / 32);
}

void __syncthreads() {
  const int g = bar_gen;
  bar_count++;
  release_if_complete(cur / 32);
  while (bar_gen == g) yield_();
}

static void warp_barrier() {
  const int w = cur / 32, g = warp_gen[w];
  warp_count[w]++;
  release_if_complete(w);
  while (warp_gen[w] == g) yield_();
}

// The shuffles within a warp: each lane publishes its value, then reads
// lane src (its own value when src is past the warp's end or the block's).
static double shuffle(double v, int src) {
  const int t = (int)threadIdx.x;
  slots[t] = v;
  warp_barrier();
  const int s = (t & ~31) + src;
  const double r = src < 32 && s < (int)blockDim.x ? slots[s] : v;
  warp_barrier();
  return r;
}
// __shfl_down_sync reads lane + off.
float __shfl_down_sync(unsigned, float v, int off) { return (float)shuffle(v, ((int)threadIdx.x & 31) + off); }
double __shfl_down_sync(unsigned, double v, int off) { return shuffle(v, ((int)threadIdx.x & 31) + off); }
// __shfl_sync reads lane src (0 to 31).
float __shfl_sync(unsigned, float v, int src) { return (float)shuffle(v, src & 31); }
double __shfl_sync(unsigned, double v, int src) { return shuffle(v, src & 31); }

static void run_block(int n) {
  finished.assign(n, 0);
  if (stacks.size() < n * kStack) stacks.resize(n * kStack);
  slots.assign(n, 0.0);
  const int warps = (n + 31) / 32;
  warp_live.assign(warps, 0);
  warp_count.assign(warps, 0);
  warp_gen.assign(warps, 0);
  for (int t = 0; t < n; t++) warp_live[t / 32]++;
  live = n;
  bar_count = 0;
  bar_gen = 0;
  fibers_init(n);
  // Round robin until every thread has ended; a waiting thread, resumed,
  // checks its barrier and yields again.
  while (live > 0) {
    for (int t = 0; t < n; t++) {
      if (finished[t]) continue;
      cur = t;
      threadIdx = {(unsigned)t, 0, 0};
      resume(t);
    }
  }
}

extern "C" int emu_launch(const char *name, unsigned gx, unsigned gy, unsigned bx, void **p) {
  const emu_entry *e = nullptr;
  for (int i = 0; i < emu_nkernels; i++)
    if (strcmp(emu_kernels[i].name, name) == 0) e = &emu_kernels[i];
  if (!e) return 801;  // CUDA_ERROR_NOT_SUPPORTED
  pthread_mutex_lock(&mu);
  run = &e->run;
  params = p;
  gridDim = {gx, gy, 1};
  blockDim = {bx, 1, 1};
  for (unsigned y = 0; y < gy; y++)
    for (unsigned x = 0; x < gx; x++) {
      blockIdx = {x, y, 0};
      run_block((int)bx);
    }
  pthread_mutex_unlock(&mu);
  return 0;
}
