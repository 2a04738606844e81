// The scheduler of cudaemu.h: blocks one after another, a block's threads
// as fibers that yield whenever they wait at a barrier (__syncthreads for
// the block, the shuffles for their warp).
//
// A fiber switch is the emulator's inner loop: every thread of every
// block starts with one, and each barrier costs one more. On x86-64 the
// switch is the few instructions below, which save and restore the
// callee-saved registers and the stack pointer, and a waiting thread
// switches straight to the next; elsewhere it is ucontext's swapcontext
// through a scheduler, two a barrier, each saving the signal mask with a
// system call (several times slower on the small kernels' blocks).
#include "cudaemu.h"

#include <pthread.h>
#include <ucontext.h>

#include <vector>

emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

// The kernel table, from the registry the test generates.
extern const emu_entry emu_kernels[];
extern const int emu_nkernels;

// Each thread's stack: kStack bytes, the stacks kStride apart. The odd
// stride (17 cache lines more than a power of two) puts the stacks' tops,
// where the threads switch, in different cache sets; 128 KiB apart they
// would all fall in the same few, and every switch would miss the cache.
static const size_t kStack = 128 * 1024;
static const size_t kStride = kStack + 17 * 64;
static std::vector<char> stacks;
static std::vector<char> finished;
static int cur;
static const emu_invoker_t *run;
static void **params;
static std::vector<double> slots;  // two sets of a slot a thread
static std::vector<char> slot_set;  // the set of each thread's next shuffle
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int nthreads;  // the block's
static void fiber_main();

// Barriers: a count of arrivals and a generation that advances when every
// live thread of the block (or of the warp) has arrived. A thread that
// ends releases a barrier the others already wait at, as on the GPU,
// where exited threads no longer take part.
static int live, bar_count, bar_gen;
static std::vector<int> warp_live, warp_count, warp_gen;

// next_live is the first thread after t, in round-robin order, that has
// not ended (t itself if no other is left), or -1 if none is left.
static int next_live(int t) {
  for (int u = t + 1; u < nthreads; u++)
    if (!finished[u]) return u;
  for (int u = 0; u <= t; u++)
    if (!finished[u]) return u;
  return -1;
}

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
static void fiber_entry();

// enter saves the running context (the scheduler's or a thread's) in
// *save and runs thread t until it waits or ends: from the top of its
// stack the first time, else from where it yielded.
static void enter(void **save, int t) {
  cur = t;
  threadIdx = {(unsigned)t, 0, 0};
  if (fiber_sp[t])
    emu_switch(save, fiber_sp[t]);
  else
    emu_start(save, stacks.data() + (size_t)t * kStride + kStack, fiber_entry);
}

// A waiting thread hands over to the next live thread itself, in the
// round-robin order of the scheduler below (one switch where going
// through the scheduler would take two); the scheduler runs again only
// when the block has ended.
static void yield_() {
  const int t = cur, u = next_live(t);
  if (u != t) enter(&fiber_sp[t], u);
}

// fiber_entry runs a thread to its end and hands over to the next live
// thread, or to the scheduler when none is left (nothing resumes a
// finished fiber).
static void fiber_entry() {
  fiber_main();
  void *dead;
  const int u = next_live(cur);
  if (u < 0)
    emu_switch(&dead, sched_sp);
  else
    enter(&dead, u);
}

static void run_threads(int n) {
  fiber_sp.assign(n, nullptr);
  enter(&sched_sp, 0);
}
#else
static ucontext_t sched;
static std::vector<ucontext_t> fibers;

static void yield_() { swapcontext(&fibers[cur], &sched); }

static void run_threads(int n) {
  fibers.resize(n);
  for (int t = 0; t < n; t++) {
    getcontext(&fibers[t]);
    fibers[t].uc_stack.ss_sp = stacks.data() + (size_t)t * kStride;
    fibers[t].uc_stack.ss_size = kStack;
    fibers[t].uc_link = &sched;  // returning resumes the scheduler
    makecontext(&fibers[t], fiber_main, 0);
  }
  // Round robin until every thread has ended; a waiting thread, resumed,
  // checks its barrier and yields again.
  while (live > 0) {
    for (int t = 0; t < n; t++) {
      if (finished[t]) continue;
      cur = t;
      threadIdx = {(unsigned)t, 0, 0};
      swapcontext(&sched, &fibers[t]);
    }
  }
}
#endif

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
// Successive shuffles of a thread alternate between two sets of slots, so
// that one barrier a shuffle suffices: a lane writes the set it read two
// shuffles ago only after the barrier of the shuffle between, which every
// lane reaches after its read.
static double shuffle(double v, int src) {
  const int t = (int)threadIdx.x, n = (int)blockDim.x;
  double *set = &slots[(size_t)slot_set[t] * n];
  slot_set[t] ^= 1;
  set[t] = v;
  warp_barrier();
  const int s = (t & ~31) + src;
  return src < 32 && s < n ? set[s] : v;
}
// __shfl_down_sync reads lane + off.
float __shfl_down_sync(unsigned, float v, int off) { return (float)shuffle(v, ((int)threadIdx.x & 31) + off); }
double __shfl_down_sync(unsigned, double v, int off) { return shuffle(v, ((int)threadIdx.x & 31) + off); }
// __shfl_sync reads lane src (0 to 31).
float __shfl_sync(unsigned, float v, int src) { return (float)shuffle(v, src & 31); }
double __shfl_sync(unsigned, double v, int src) { return shuffle(v, src & 31); }

static void run_block(int n) {
  nthreads = n;
  finished.assign(n, 0);
  if (stacks.size() < n * kStride) stacks.resize(n * kStride);
  slots.assign(2 * (size_t)n, 0.0);
  slot_set.assign(n, 0);
  const int warps = (n + 31) / 32;
  warp_live.assign(warps, 0);
  warp_count.assign(warps, 0);
  warp_gen.assign(warps, 0);
  for (int t = 0; t < n; t++) warp_live[t / 32]++;
  live = n;
  bar_count = 0;
  bar_gen = 0;
  run_threads(n);
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
