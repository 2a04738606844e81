// A stand-in for libnccl.so.2 that runs NCCL's calls for real between the
// processes of one machine, so that learner/collective/nccl and the
// learners above it run their multi-rank paths in tests without a GPU.
// It goes with the stand-in CUDA driver (learner/cuda/testdata/fakecuda.c),
// whose "device memory" is host memory of the process: a device pointer
// here is an address this process may read and write.
//
// What it does as NCCL does:
//   - the unique id carries a rendezvous address: ncclGetUniqueId listens
//     on 127.0.0.1 and serves the rendezvous from a thread of its own
//     process; every rank connects to it with its own listening port and
//     gets everyone's, and the ranks then connect to one another (a TCP
//     connection per pair);
//   - ncclCommInitRankScalable reads ncclConfig_t as NCCL 2.27 lays it out
//     (the size field must be that version's, 72 bytes, and the magic and
//     version NCCL_CONFIG_INITIALIZER's) and, with blocking = 0, returns
//     ncclInProgress and connects in the background until
//     ncclCommGetAsyncError says ncclSuccess;
//   - collectives are queued on the communicator and carried out by its
//     thread, in the order they were called; the stream is not idle
//     (cuStreamQuery of the stand-in driver answers CUDA_ERROR_NOT_READY,
//     through fakenccl_pending) until they are done;
//   - ncclGroupStart/End: the calls between them are one operation, whose
//     sends and receives progress together (grouped send/recv to every
//     peer, grouped reduce or broadcast to every root, do not deadlock);
//   - a peer that dies (its connections close) fails the operation with
//     ncclRemoteError and ncclGetLastError names its rank and pid; a peer
//     that stops answering is the caller's watchdog's to find, and
//     ncclCommAbort then wakes and ends the communicator's thread at once.
//
// Reductions (ncclSum, ncclAvg on float32 and bfloat16) add the ranks'
// values in one fixed order, the same on every rank and at every call: a
// binary tree over the ranks in rank order, two sums of equally many
// ranks added as soon as both exist (((r0+r1)+(r2+r3)) at 4 ranks),
// accumulated in float32 and rounded to bfloat16 once. Real NCCL's order
// depends on its algorithm and topology; the stand-in's determinism is
// its own.
//
// What it does not do: several communicators in one group call, ncclAvg
// on integers, reductions of types other than float32 and bfloat16,
// ncclCommSplit and the rest of NCCL's API. Each is refused with
// ncclInvalidArgument or ncclInvalidUsage and a message from
// ncclGetLastError; symbols the learner never calls are absent.
//
// AIPO_FAKE_NCCL_VERSION (e.g. 22204) makes ncclGetVersion report another
// version, for the tests of the learner's version checks.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NCCL_VERSION_CODE 22703 // 2.27.3
#define CONFIG_SIZE 72          // sizeof(ncclConfig_t) in NCCL 2.27's nccl.h
#define CONFIG_MAGIC 0xcafebeefu
#define UNDEF_INT (-2147483647 - 1)
#define MAX_RANKS 64

enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum { opSum = 0, opProd = 1, opMax = 2, opMin = 3, opAvg = 4 };
enum { tInt8, tUint8, tInt32, tUint32, tInt64, tUint64, tFloat16, tFloat32, tFloat64, tBfloat16 };

static size_t type_size(int t) {
  switch (t) {
  case tInt8: case tUint8: return 1;
  case tFloat16: case tBfloat16: return 2;
  case tInt32: case tUint32: case tFloat32: return 4;
  case tInt64: case tUint64: case tFloat64: return 8;
  }
  return 0;
}

static const char *call_names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclReduce",
                                   "ncclBroadcast", "ncclSend",          "ncclRecv",      "ncclCommFinalize"};
enum { cAllReduce, cReduceScatter, cAllGather, cReduce, cBroadcast, cSend, cRecv, cFinalize };

// ncclConfig_t as of NCCL 2.27.
typedef struct {
  size_t size;
  unsigned int magic, version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char *netName;
  int splitShare, trafficClass;
  const char *commName;
  int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs;
} config_t;

// The unique id's 128 bytes.
typedef struct {
  char magic[16]; // "aipo-fakenccl"
  uint16_t port;  // the rendezvous's, on 127.0.0.1
  uint32_t pid;   // the process serving it
  uint64_t nonce;
} uid_t_;

// One call of NCCL, as queued.
typedef struct {
  int kind;
  char *send, *recv;
  size_t count; // elements
  int type, op, root, peer;
} call_t;

typedef struct op {
  struct op *next;
  int ncalls;
  call_t *calls;
} op_t;

typedef struct comm {
  int nranks, rank, blocking;
  uid_t_ id;
  int listen_fd;
  int fd[MAX_RANKS];
  int pid[MAX_RANKS];
  pthread_t thread;
  int have_thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state; // ncclInProgress while connecting, then ncclSuccess or the error
  int aborted;
  int pending; // operations queued and not done
  uint64_t seq; // collective calls done (every rank makes the same ones)
  uint64_t sent[MAX_RANKS], received[MAX_RANKS]; // point-to-point messages, by peer
  op_t *head, *tail;
  char last[512];
} comm_t;

static long total_pending; // every communicator's pending operations
static __thread char last_global[512];

// fakenccl_pending is what the stand-in driver's cuStreamQuery asks: the
// operations queued on a stream (any stream: the stand-in driver has one)
// that are not done. A failed operation stays pending until its
// communicator is aborted or destroyed, as a real stream never finishes a
// kernel that waits on a dead peer.
long fakenccl_pending(void) { return __atomic_load_n(&total_pending, __ATOMIC_SEQ_CST); }

static void set_last(comm_t *c, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (c) {
    pthread_mutex_lock(&c->mu);
    snprintf(c->last, sizeof c->last, "%s", buf);
    pthread_mutex_unlock(&c->mu);
  }
  snprintf(last_global, sizeof last_global, "%s", buf);
}

static int fail(comm_t *c, int code, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  set_last(c, "%s", buf);
  return code;
}

static int version(void) {
  const char *v = getenv("AIPO_FAKE_NCCL_VERSION");
  return v && *v ? atoi(v) : NCCL_VERSION_CODE;
}

int ncclGetVersion(int *v) {
  if (!v) return ncclInvalidArgument;
  *v = version();
  return ncclSuccess;
}

const char *ncclGetErrorString(int r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char *ncclGetLastError(comm_t *c) {
  static __thread char copy[512];
  if (c) {
    pthread_mutex_lock(&c->mu);
    snprintf(copy, sizeof copy, "%s", c->last);
    pthread_mutex_unlock(&c->mu);
    if (copy[0]) return copy;
  }
  return last_global;
}

// ---- sockets ----

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int listen_local(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, MAX_RANKS) < 0 ||
      getsockname(fd, (struct sockaddr *)&a, &n) < 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

static int aborted(comm_t *c) { return c && __atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST); }

// wait_fd waits until fd is ready for events, the communicator is aborted
// or the deadline (a now() time) passes: 1, 0 (aborted or deadline), -1.
static int wait_fd(comm_t *c, int fd, short events, double deadline) {
  while (!aborted(c) && now() < deadline) {
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, 50);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
  return 0;
}

// full_io reads or writes n bytes on a blocking socket, waking for abort.
static int full_io(comm_t *c, int fd, void *buf, size_t n, int writing, double deadline) {
  char *p = buf;
  while (n > 0) {
    if (wait_fd(c, fd, writing ? POLLOUT : POLLIN, deadline) != 1) return -1;
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
    if (k == 0) return -1;
    if (k < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int connect_local(comm_t *c, uint16_t port, double deadline) {
  while (!aborted(c) && now() < deadline) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    close(fd);
    usleep(10000);
  }
  return -1;
}

static int accept_one(comm_t *c, int lfd, double deadline) {
  if (wait_fd(c, lfd, POLLIN, deadline) != 1) return -1;
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

// ---- the rendezvous (ncclGetUniqueId's thread) ----

typedef struct {
  uint32_t magic, nranks, rank, port, pid;
} hello_t;

typedef struct {
  uint32_t magic, status; // 0, or 1: the ranks disagree (text follows)
  uint32_t port[MAX_RANKS], pid[MAX_RANKS];
  char why[256];
} table_t;

#define HELLO_MAGIC 0x6e63636cu // "nccl"
#define RENDEZVOUS_LIMIT 1800.0 // seconds the rendezvous thread waits for its ranks

static void *rendezvous(void *arg) {
  int lfd = (int)(intptr_t)arg;
  double deadline = now() + RENDEZVOUS_LIMIT;
  int fds[MAX_RANKS];
  hello_t h[MAX_RANKS];
  int got = 0, want = -1;
  table_t t;
  memset(&t, 0, sizeof t);
  t.magic = HELLO_MAGIC;
  while (want < 0 || got < want) {
    int fd = accept_one(NULL, lfd, deadline);
    if (fd < 0) break;
    hello_t x;
    if (full_io(NULL, fd, &x, sizeof x, 0, now() + 30) != 0 || x.magic != HELLO_MAGIC) {
      close(fd);
      continue;
    }
    if (x.nranks < 1 || x.nranks > MAX_RANKS || x.rank >= x.nranks) {
      t.status = 1;
      snprintf(t.why, sizeof t.why, "rank %u of %u: give 1 to %d ranks and a rank below their number", x.rank, x.nranks, MAX_RANKS);
    } else if (want < 0) {
      want = (int)x.nranks;
    } else if ((int)x.nranks != want) {
      t.status = 1;
      snprintf(t.why, sizeof t.why, "rank %u says there are %u ranks, the first rank to arrive said %d", x.rank, x.nranks, want);
    }
    for (int i = 0; i < got && !t.status; i++)
      if (h[i].rank == x.rank) {
        t.status = 1;
        snprintf(t.why, sizeof t.why, "rank %u joined twice (pids %u and %u)", x.rank, h[i].pid, x.pid);
      }
    fds[got] = fd;
    h[got++] = x;
    if (t.status || got == MAX_RANKS) break;
  }
  if (want > 0 && got == want && !t.status)
    for (int i = 0; i < got; i++) {
      t.port[h[i].rank] = h[i].port;
      t.pid[h[i].rank] = h[i].pid;
    }
  else if (!t.status) {
    t.status = 1;
    snprintf(t.why, sizeof t.why, "only %d of the ranks arrived at the rendezvous", got);
  }
  for (int i = 0; i < got; i++) {
    full_io(NULL, fds[i], &t, sizeof t, 1, now() + 30);
    close(fds[i]);
  }
  close(lfd);
  return NULL;
}

int ncclGetUniqueId(void *out) {
  if (!out) return fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: the id pointer is NULL");
  uint16_t port;
  int lfd = listen_local(&port);
  if (lfd < 0) return fail(NULL, ncclSystemError, "ncclGetUniqueId: listening on 127.0.0.1: %s", strerror(errno));
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&th, &attr, rendezvous, (void *)(intptr_t)lfd) != 0) {
    close(lfd);
    return fail(NULL, ncclSystemError, "ncclGetUniqueId: starting the rendezvous thread failed");
  }
  uid_t_ id;
  memset(&id, 0, sizeof id);
  strcpy(id.magic, "aipo-fakenccl");
  id.port = port;
  id.pid = (uint32_t)getpid();
  id.nonce = (uint64_t)now() * 1000003u ^ (uint64_t)getpid();
  memset(out, 0, 128);
  memcpy(out, &id, sizeof id);
  return ncclSuccess;
}

// ---- the communicator's thread ----

static void run_ops(comm_t *c);

// connect_all is the communicator's connection: hello to the rendezvous,
// everyone's port back, then a connection to every lower rank and one
// accepted from every higher rank.
static int connect_all(comm_t *c) {
  double deadline = now() + RENDEZVOUS_LIMIT;
  uint16_t port;
  c->listen_fd = listen_local(&port);
  if (c->listen_fd < 0) return fail(c, ncclSystemError, "listening on 127.0.0.1: %s", strerror(errno));
  int rfd = connect_local(c, c->id.port, deadline);
  if (rfd < 0)
    return aborted(c) ? ncclInvalidUsage
                      : fail(c, ncclSystemError, "cannot reach the rendezvous at 127.0.0.1:%u (pid %u)", c->id.port, c->id.pid);
  hello_t h = {HELLO_MAGIC, (uint32_t)c->nranks, (uint32_t)c->rank, port, (uint32_t)getpid()};
  table_t t;
  int r = full_io(c, rfd, &h, sizeof h, 1, deadline) || full_io(c, rfd, &t, sizeof t, 0, deadline);
  close(rfd);
  if (r) return aborted(c) ? ncclInvalidUsage : fail(c, ncclRemoteError, "the rendezvous at 127.0.0.1:%u closed before every rank arrived", c->id.port);
  if (t.status) return fail(c, ncclInvalidUsage, "rendezvous: %s", t.why);
  for (int j = 0; j < c->nranks; j++) c->pid[j] = (int)t.pid[j];
  for (int j = 0; j < c->rank; j++) {
    int fd = connect_local(c, (uint16_t)t.port[j], deadline);
    uint32_t me = (uint32_t)c->rank;
    if (fd < 0 || full_io(c, fd, &me, 4, 1, deadline)) {
      if (fd >= 0) close(fd);
      return aborted(c) ? ncclInvalidUsage : fail(c, ncclRemoteError, "cannot connect to rank %d (pid %d)", j, c->pid[j]);
    }
    c->fd[j] = fd;
  }
  for (int k = c->rank + 1; k < c->nranks; k++) {
    int fd = accept_one(c, c->listen_fd, deadline);
    uint32_t who;
    if (fd < 0 || full_io(c, fd, &who, 4, 0, deadline) || (int)who <= c->rank || (int)who >= c->nranks || c->fd[who] >= 0) {
      if (fd >= 0) close(fd);
      return aborted(c) ? ncclInvalidUsage : fail(c, ncclRemoteError, "a higher rank did not connect (%d of %d did)", k - c->rank - 1, c->nranks - c->rank - 1);
    }
    c->fd[who] = fd;
  }
  close(c->listen_fd);
  c->listen_fd = -1;
  for (int j = 0; j < c->nranks; j++)
    if (c->fd[j] >= 0) fcntl(c->fd[j], F_SETFL, fcntl(c->fd[j], F_GETFL) | O_NONBLOCK);
  return ncclSuccess;
}

static void *comm_thread(void *arg) {
  comm_t *c = arg;
  signal(SIGPIPE, SIG_IGN);
  int r = connect_all(c);
  pthread_mutex_lock(&c->mu);
  c->state = r;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (r == ncclSuccess) run_ops(c);
  return NULL;
}

int ncclCommInitRankScalable(comm_t **out, int nranks, int rank, int nId, void *ids, config_t *cfg) {
  if (!out || !ids) return fail(NULL, ncclInvalidArgument, "ncclCommInitRankScalable: NULL comm or ids");
  *out = NULL;
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
    return fail(NULL, ncclInvalidArgument, "ncclCommInitRankScalable: rank %d of %d ranks (the stand-in takes 1 to %d)", rank, nranks, MAX_RANKS);
  if (nId != 1) return fail(NULL, ncclInvalidArgument, "ncclCommInitRankScalable: %d unique ids; the stand-in takes one", nId);
  uid_t_ id;
  memcpy(&id, ids, sizeof id);
  if (strcmp(id.magic, "aipo-fakenccl") != 0) return fail(NULL, ncclInvalidArgument, "ncclCommInitRankScalable: the unique id was not made by ncclGetUniqueId");
  int blocking = 1;
  if (cfg) {
    // NCCL_CONFIG_INITIALIZER of the version the caller built against:
    // the size is that version's sizeof(ncclConfig_t).
    if (cfg->magic != CONFIG_MAGIC)
      return fail(NULL, ncclInvalidArgument, "ncclConfig_t: magic 0x%x, want 0x%x (NCCL_CONFIG_INITIALIZER)", cfg->magic, CONFIG_MAGIC);
    if (cfg->size != CONFIG_SIZE)
      return fail(NULL, ncclInvalidArgument, "ncclConfig_t: size %zu, but NCCL 2.27's ncclConfig_t has %d bytes", cfg->size, CONFIG_SIZE);
    if ((int)cfg->version != version())
      return fail(NULL, ncclInvalidArgument, "ncclConfig_t: version %u, but this NCCL is %d", cfg->version, version());
    int undef[] = {cfg->cgaClusterSize, cfg->minCTAs, cfg->maxCTAs, cfg->splitShare, cfg->trafficClass,
                   cfg->collnetEnable, cfg->CTAPolicy, cfg->shrinkShare, cfg->nvlsCTAs};
    for (size_t i = 0; i < sizeof undef / sizeof undef[0]; i++)
      if (undef[i] != UNDEF_INT)
        return fail(NULL, ncclInvalidArgument, "ncclConfig_t: field %zu after blocking is %d; the learner leaves them NCCL_CONFIG_UNDEF_INT", i, undef[i]);
    if (cfg->netName || cfg->commName) return fail(NULL, ncclInvalidArgument, "ncclConfig_t: netName and commName should be NULL");
    if (cfg->blocking == 0) blocking = 0;
    else if (cfg->blocking != 1 && cfg->blocking != UNDEF_INT)
      return fail(NULL, ncclInvalidArgument, "ncclConfig_t: blocking %d", cfg->blocking);
  }
  comm_t *c = calloc(1, sizeof *c);
  if (!c) return fail(NULL, ncclSystemError, "out of host memory");
  c->nranks = nranks;
  c->rank = rank;
  c->blocking = blocking;
  c->id = id;
  c->listen_fd = -1;
  c->state = ncclInProgress;
  for (int j = 0; j < MAX_RANKS; j++) c->fd[j] = -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (pthread_create(&c->thread, NULL, comm_thread, c) != 0) {
    free(c);
    return fail(NULL, ncclSystemError, "starting the communicator's thread failed");
  }
  c->have_thread = 1;
  *out = c;
  if (!blocking) return ncclInProgress;
  pthread_mutex_lock(&c->mu);
  while (c->state == ncclInProgress) pthread_cond_wait(&c->cv, &c->mu);
  int r = c->state;
  pthread_mutex_unlock(&c->mu);
  return r;
}

int ncclCommGetAsyncError(comm_t *c, int *r) {
  if (!c || !r) return fail(NULL, ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
  pthread_mutex_lock(&c->mu);
  *r = c->state;
  pthread_mutex_unlock(&c->mu);
  return ncclSuccess;
}

// ---- operations ----

// A message on a connection: a header naming the call, then its bytes.
typedef struct {
  uint32_t magic, kind;
  uint64_t seq, bytes;
} msghdr_t;

// One transfer with a peer: a header and a payload.
typedef struct {
  msghdr_t hdr, got; // what is sent or expected; what arrived
  char *data;
  size_t done; // bytes of header + payload moved
} xfer_t;

typedef struct {
  xfer_t *v;
  int n, cap, at;
} xlist_t;

static int push(xlist_t *l, int kind, uint64_t seq, char *data, size_t bytes) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 8;
    xfer_t *v = realloc(l->v, cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    l->cap = cap;
  }
  xfer_t x = {{HELLO_MAGIC, (uint32_t)kind, seq, bytes}, {0}, data, 0};
  l->v[l->n++] = x;
  return 0;
}

static float bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(b >> 16) | 0x40;
  b += 0x7fffu + ((b >> 16) & 1u);
  return (uint16_t)(b >> 16);
}

// reduce_into writes the reduction of the n ranks' buffers (leaf[r] is
// rank r's) into dst, in the fixed tree described at the top.
static void reduce_into(char *dst, char **leaf, int n, size_t count, int type, int op) {
  for (size_t i = 0; i < count; i++) {
    float st[MAX_RANKS];
    int cnt[MAX_RANKS], top = 0;
    for (int r = 0; r < n; r++) {
      st[top] = type == tFloat32 ? ((float *)leaf[r])[i] : bf16_to_f32(((uint16_t *)leaf[r])[i]);
      cnt[top++] = 1;
      while (top >= 2 && cnt[top - 2] == cnt[top - 1]) {
        st[top - 2] += st[top - 1];
        cnt[top - 2] += cnt[top - 1];
        top--;
      }
    }
    while (top >= 2) {
      st[top - 2] += st[top - 1];
      top--;
    }
    float s = st[0];
    if (op == opAvg) s /= (float)n;
    if (type == tFloat32) ((float *)dst)[i] = s;
    else ((uint16_t *)dst)[i] = f32_to_bf16(s);
  }
}

// stage is a received buffer, applied after every transfer of the
// operation is done.
typedef struct {
  char *buf;
} stage_t;

// exec_op runs one operation (a call, or a group's calls) to the end:
// every send and receive with every peer progresses together, then the
// received bytes are reduced or copied into place in call order.
static int exec_op(comm_t *c, op_t *o) {
  int n = c->nranks, me = c->rank, rc = ncclSuccess;
  xlist_t out[MAX_RANKS], in[MAX_RANKS];
  memset(out, 0, sizeof out);
  memset(in, 0, sizeof in);
  // staging[k][r]: call k's bytes from rank r (NULL when none).
  char ***staging = calloc(o->ncalls, sizeof *staging);
  // Self sends and receives of a group are paired in order.
  char **self_send = calloc(o->ncalls, sizeof *self_send);
  int nself_send = 0;
  if (!staging || !self_send) return fail(c, ncclSystemError, "out of host memory");
  for (int k = 0; k < o->ncalls && rc == ncclSuccess; k++) {
    call_t *x = &o->calls[k];
    size_t bytes = x->count * type_size(x->type);
    // A collective's messages carry its number among the collectives; a
    // send's, its number among the sends to that peer, which the
    // receive's number among the receives from it must match (NCCL pairs
    // a peer's sends and receives in order).
    uint64_t s = 0;
    if (x->kind == cSend && x->peer != me) s = c->sent[x->peer]++;
    else if (x->kind == cRecv && x->peer != me) s = c->received[x->peer]++;
    else if (x->kind != cSend && x->kind != cRecv) s = c->seq++;
    staging[k] = calloc(n, sizeof(char *));
    if (!staging[k]) { rc = fail(c, ncclSystemError, "out of host memory"); break; }
#define RECV_FROM(p, nbytes)                                                        \
  do {                                                                              \
    staging[k][p] = malloc((nbytes) ? (nbytes) : 1);                                \
    if (!staging[k][p] || push(&in[p], x->kind == cRecv ? cSend : x->kind, s, staging[k][p], (nbytes)) != 0) \
      rc = fail(c, ncclSystemError, "out of host memory");                          \
  } while (0)
#define SEND_TO(p, ptr, nbytes)                                                     \
  do {                                                                              \
    if (push(&out[p], x->kind, s, (ptr), (nbytes)) != 0) rc = fail(c, ncclSystemError, "out of host memory"); \
  } while (0)
    switch (x->kind) {
    case cAllReduce:
    case cAllGather:
      for (int p = 0; p < n; p++)
        if (p != me) {
          SEND_TO(p, x->send, bytes);
          RECV_FROM(p, bytes);
        }
      break;
    case cReduceScatter:
      for (int p = 0; p < n; p++)
        if (p != me) {
          SEND_TO(p, x->send + p * bytes, bytes);
          RECV_FROM(p, bytes);
        }
      break;
    case cReduce:
      if (me != x->root) SEND_TO(x->root, x->send, bytes);
      else
        for (int p = 0; p < n; p++)
          if (p != me) RECV_FROM(p, bytes);
      break;
    case cBroadcast:
      if (me == x->root) {
        for (int p = 0; p < n; p++)
          if (p != me) SEND_TO(p, x->send, bytes);
      } else
        RECV_FROM(x->root, bytes);
      break;
    case cSend:
      if (x->peer == me) self_send[nself_send++] = x->send;
      else SEND_TO(x->peer, x->send, bytes);
      break;
    case cRecv:
      if (x->peer != me) RECV_FROM(x->peer, bytes);
      break;
    case cFinalize:
      // A goodbye to every peer and one from each: no rank closes its
      // connections while another may still read from them.
      for (int p = 0; p < n; p++)
        if (p != me) {
          SEND_TO(p, NULL, 0);
          RECV_FROM(p, 0);
        }
      break;
    }
#undef RECV_FROM
#undef SEND_TO
  }
  // Progress every connection until all is moved.
  while (rc == ncclSuccess) {
    struct pollfd pf[MAX_RANKS];
    int peer_of[MAX_RANKS], np = 0;
    for (int p = 0; p < n; p++) {
      short ev = 0;
      if (out[p].at < out[p].n) ev |= POLLOUT;
      if (in[p].at < in[p].n) ev |= POLLIN;
      if (ev) {
        pf[np].fd = c->fd[p];
        pf[np].events = ev;
        pf[np].revents = 0;
        peer_of[np++] = p;
      }
    }
    if (np == 0) break;
    if (aborted(c)) { rc = fail(c, ncclInvalidUsage, "the communicator was aborted"); break; }
    int r = poll(pf, np, 50);
    if (r < 0 && errno != EINTR) { rc = fail(c, ncclSystemError, "poll: %s", strerror(errno)); break; }
    if (r <= 0) continue;
    for (int i = 0; i < np && rc == ncclSuccess; i++) {
      int p = peer_of[i];
      if (pf[i].revents & POLLOUT) {
        while (out[p].at < out[p].n) {
          xfer_t *x = &out[p].v[out[p].at];
          size_t total = sizeof x->hdr + x->hdr.bytes;
          const char *src = x->done < sizeof x->hdr ? (char *)&x->hdr + x->done : x->data + (x->done - sizeof x->hdr);
          size_t len = x->done < sizeof x->hdr ? sizeof x->hdr - x->done : total - x->done;
          ssize_t k = send(c->fd[p], src, len, MSG_NOSIGNAL | MSG_DONTWAIT);
          if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
          if (k <= 0) {
            rc = fail(c, ncclRemoteError, "%s: rank %d (pid %d) closed its connection (sending: %s): it exited or aborted", call_names[x->hdr.kind], p, c->pid[p], strerror(errno));
            break;
          }
          x->done += (size_t)k;
          if (x->done == total) out[p].at++;
        }
      }
      if (rc == ncclSuccess && (pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
        while (in[p].at < in[p].n) {
          xfer_t *x = &in[p].v[in[p].at];
          msghdr_t want = x->hdr;
          size_t total = sizeof want + want.bytes;
          char *dst;
          size_t len;
          msghdr_t *g = &x->got;
          if (x->done < sizeof *g) {
            dst = (char *)g + x->done;
            len = sizeof *g - x->done;
          } else {
            dst = x->data + (x->done - sizeof *g);
            len = total - x->done;
          }
          ssize_t k = recv(c->fd[p], dst, len, MSG_DONTWAIT);
          if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
          if (k == 0) {
            rc = fail(c, ncclRemoteError, "%s: rank %d (pid %d) closed its connection: it exited or aborted", call_names[want.kind], p, c->pid[p]);
            break;
          }
          if (k < 0) {
            rc = fail(c, ncclRemoteError, "%s: rank %d (pid %d) closed its connection (receiving: %s): it exited or aborted", call_names[want.kind], p, c->pid[p], strerror(errno));
            break;
          }
          x->done += (size_t)k;
          if (x->done == sizeof *g && (g->magic != want.magic || g->kind != want.kind || g->seq != want.seq || g->bytes != want.bytes)) {
            rc = fail(c, ncclInvalidUsage,
                      "rank %d sent %s #%llu of %llu bytes where this rank (%d) expected %s #%llu of %llu bytes: the ranks called NCCL in different orders or with different counts",
                      p, g->kind < 8 ? call_names[g->kind] : "?", (unsigned long long)g->seq, (unsigned long long)g->bytes, me,
                      call_names[want.kind], (unsigned long long)want.seq, (unsigned long long)want.bytes);
            break;
          }
          if (x->done == total) in[p].at++;
        }
      }
    }
  }
  // Apply the received bytes, call by call.
  int nself_recv = 0;
  for (int k = 0; k < o->ncalls && rc == ncclSuccess; k++) {
    call_t *x = &o->calls[k];
    size_t bytes = x->count * type_size(x->type);
    char *leaf[MAX_RANKS];
    switch (x->kind) {
    case cAllReduce:
      for (int p = 0; p < n; p++) leaf[p] = p == me ? x->send : staging[k][p];
      reduce_into(x->recv, leaf, n, x->count, x->type, x->op);
      break;
    case cReduceScatter:
      for (int p = 0; p < n; p++) leaf[p] = p == me ? x->send + me * bytes : staging[k][p];
      reduce_into(x->recv, leaf, n, x->count, x->type, x->op);
      break;
    case cAllGather:
      memmove(x->recv + me * bytes, x->send, bytes);
      for (int p = 0; p < n; p++)
        if (p != me) memcpy(x->recv + p * bytes, staging[k][p], bytes);
      break;
    case cReduce:
      if (me == x->root) {
        for (int p = 0; p < n; p++) leaf[p] = p == me ? x->send : staging[k][p];
        reduce_into(x->recv, leaf, n, x->count, x->type, x->op);
      }
      break;
    case cBroadcast:
      if (me == x->root) memmove(x->recv, x->send, bytes);
      else memcpy(x->recv, staging[k][x->root], bytes);
      break;
    case cRecv:
      if (x->peer != me) memcpy(x->recv, staging[k][x->peer], bytes);
      else if (nself_recv < nself_send) memmove(x->recv, self_send[nself_recv++], bytes);
      else rc = fail(c, ncclInvalidUsage, "ncclRecv from this rank (%d) without an ncclSend to it in the same group", me);
      break;
    }
  }
  for (int k = 0; k < o->ncalls; k++) {
    if (staging[k])
      for (int p = 0; p < n; p++) free(staging[k][p]);
    free(staging[k]);
  }
  for (int p = 0; p < n; p++) {
    free(out[p].v);
    free(in[p].v);
  }
  free(staging);
  free(self_send);
  return rc;
}

static void run_ops(comm_t *c) {
  for (;;) {
    pthread_mutex_lock(&c->mu);
    while (!c->head && !c->aborted) pthread_cond_wait(&c->cv, &c->mu);
    if (c->aborted) {
      pthread_mutex_unlock(&c->mu);
      return;
    }
    op_t *o = c->head;
    pthread_mutex_unlock(&c->mu);
    int r = exec_op(c, o);
    pthread_mutex_lock(&c->mu);
    if (r != ncclSuccess) {
      // The operation stays pending: its stream never finishes.
      if (c->state == ncclSuccess || c->state == ncclInProgress) c->state = r;
      pthread_mutex_unlock(&c->mu);
      return;
    }
    if (o->calls[0].kind == cFinalize) c->state = ncclSuccess;
    c->head = o->next;
    if (!c->head) c->tail = NULL;
    c->pending--;
    __atomic_sub_fetch(&total_pending, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&c->mu);
    free(o->calls);
    free(o);
  }
}

// ---- queuing calls and groups ----

static __thread int group_depth;
static __thread comm_t *group_comm;
static __thread call_t *group_calls;
static __thread int group_n, group_cap, group_err;

static int enqueue(comm_t *c, call_t *calls, int n, int finalize) {
  op_t *o = calloc(1, sizeof *o);
  if (!o) return fail(c, ncclSystemError, "out of host memory");
  o->calls = calls;
  o->ncalls = n;
  pthread_mutex_lock(&c->mu);
  int st = c->state;
  if (st != ncclSuccess) {
    pthread_mutex_unlock(&c->mu);
    free(o);
    free(calls);
    if (st == ncclInProgress) return fail(c, ncclInvalidUsage, "a call on a communicator that is still connecting");
    return st;
  }
  if (c->tail) c->tail->next = o;
  else c->head = o;
  c->tail = o;
  c->pending++;
  // A finalizing communicator reports ncclInProgress until the goodbye
  // is done.
  if (finalize) c->state = ncclInProgress;
  __atomic_add_fetch(&total_pending, 1, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return ncclSuccess;
}

static int submit_checked(comm_t *c, call_t x);

// submit checks a call and queues it (or adds it to the open group); a
// call refused inside a group fails the whole group at ncclGroupEnd.
static int submit(comm_t *c, call_t x) {
  int r = submit_checked(c, x);
  if (r != ncclSuccess && group_depth > 0 && group_err == ncclSuccess) group_err = r;
  return r;
}

static int submit_checked(comm_t *c, call_t x) {
  const char *name = call_names[x.kind];
  if (!c) return fail(NULL, ncclInvalidArgument, "%s: NULL communicator", name);
  if (type_size(x.type) == 0) return fail(c, ncclInvalidArgument, "%s: unknown data type %d", name, x.type);
  int reduces = x.kind == cAllReduce || x.kind == cReduceScatter || x.kind == cReduce;
  if (reduces && x.type != tFloat32 && x.type != tBfloat16)
    return fail(c, ncclInvalidArgument, "%s: the stand-in reduces float32 and bfloat16 only, not data type %d", name, x.type);
  if (reduces && x.op != opSum && x.op != opAvg)
    return fail(c, ncclInvalidArgument, "%s: the stand-in reduces with ncclSum and ncclAvg only, not op %d", name, x.op);
  if ((x.kind == cReduce || x.kind == cBroadcast) && (x.root < 0 || x.root >= c->nranks))
    return fail(c, ncclInvalidArgument, "%s: root %d of %d ranks", name, x.root, c->nranks);
  if ((x.kind == cSend || x.kind == cRecv) && (x.peer < 0 || x.peer >= c->nranks))
    return fail(c, ncclInvalidArgument, "%s: peer %d of %d ranks", name, x.peer, c->nranks);
  int needs_send = x.kind != cRecv && (x.kind != cBroadcast || x.root == c->rank);
  int needs_recv = x.kind != cSend && (x.kind != cReduce || x.root == c->rank);
  if (x.count > 0 && ((needs_send && !x.send) || (needs_recv && !x.recv)))
    return fail(c, ncclInvalidArgument, "%s: NULL buffer for %zu elements", name, x.count);
  if (group_depth > 0) {
    if (group_comm && group_comm != c) {
      group_err = fail(c, ncclInvalidUsage, "%s: the stand-in groups calls of one communicator only", name);
      return group_err;
    }
    group_comm = c;
    if (group_n == group_cap) {
      int cap = group_cap ? 2 * group_cap : 16;
      call_t *v = realloc(group_calls, cap * sizeof *v);
      if (!v) return fail(c, ncclSystemError, "out of host memory");
      group_calls = v;
      group_cap = cap;
    }
    group_calls[group_n++] = x;
    return ncclSuccess;
  }
  call_t *one = malloc(sizeof *one);
  if (!one) return fail(c, ncclSystemError, "out of host memory");
  *one = x;
  // Blocking or not, a call returns once its work is queued, as NCCL's
  // do; completion is the stream's.
  return enqueue(c, one, 1, 0);
}

int ncclGroupStart(void) {
  if (group_depth++ == 0) {
    group_comm = NULL;
    group_n = 0;
    group_err = ncclSuccess;
  }
  return ncclSuccess;
}

int ncclGroupEnd(void) {
  if (group_depth == 0) return fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  if (group_err != ncclSuccess || group_n == 0) {
    group_n = 0;
    return group_err;
  }
  call_t *calls = malloc(group_n * sizeof *calls);
  if (!calls) return fail(group_comm, ncclSystemError, "out of host memory");
  memcpy(calls, group_calls, group_n * sizeof *calls);
  int n = group_n;
  group_n = 0;
  return enqueue(group_comm, calls, n, 0);
}

int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, comm_t *c, void *stream) {
  return submit(c, (call_t){cAllReduce, (char *)send, recv, count, type, op, 0, 0});
}
int ncclReduceScatter(const void *send, void *recv, size_t recvcount, int type, int op, comm_t *c, void *stream) {
  return submit(c, (call_t){cReduceScatter, (char *)send, recv, recvcount, type, op, 0, 0});
}
int ncclAllGather(const void *send, void *recv, size_t sendcount, int type, comm_t *c, void *stream) {
  return submit(c, (call_t){cAllGather, (char *)send, recv, sendcount, type, 0, 0, 0});
}
int ncclReduce(const void *send, void *recv, size_t count, int type, int op, int root, comm_t *c, void *stream) {
  return submit(c, (call_t){cReduce, (char *)send, recv, count, type, op, root, 0});
}
int ncclBroadcast(const void *send, void *recv, size_t count, int type, int root, comm_t *c, void *stream) {
  return submit(c, (call_t){cBroadcast, (char *)send, recv, count, type, 0, root, 0});
}
int ncclSend(const void *buf, size_t count, int type, int peer, comm_t *c, void *stream) {
  return submit(c, (call_t){cSend, (char *)buf, NULL, count, type, 0, 0, peer});
}
int ncclRecv(void *buf, size_t count, int type, int peer, comm_t *c, void *stream) {
  return submit(c, (call_t){cRecv, NULL, buf, count, type, 0, 0, peer});
}

// ---- ending a communicator ----

// ncclCommFinalize queues the goodbye behind the pending work; it is done
// when ncclCommGetAsyncError says ncclSuccess again.
int ncclCommFinalize(comm_t *c) {
  if (!c) return fail(NULL, ncclInvalidArgument, "ncclCommFinalize: NULL communicator");
  call_t *x = calloc(1, sizeof *x);
  if (!x) return fail(c, ncclSystemError, "out of host memory");
  x->kind = cFinalize;
  x->type = tUint8;
  int r = enqueue(c, x, 1, 1);
  if (r != ncclSuccess) return r;
  if (c->blocking) {
    pthread_mutex_lock(&c->mu);
    while (c->pending > 0 && !c->aborted && c->state == ncclInProgress) {
      pthread_mutex_unlock(&c->mu);
      usleep(1000);
      pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
  }
  return c->blocking ? ncclSuccess : ncclInProgress;
}

static void end_comm(comm_t *c) {
  pthread_mutex_lock(&c->mu);
  c->aborted = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  for (int j = 0; j < MAX_RANKS; j++)
    if (c->fd[j] >= 0) shutdown(c->fd[j], SHUT_RDWR);
  if (c->listen_fd >= 0) shutdown(c->listen_fd, SHUT_RDWR);
  if (c->have_thread) pthread_join(c->thread, NULL);
  for (int j = 0; j < MAX_RANKS; j++)
    if (c->fd[j] >= 0) close(c->fd[j]);
  if (c->listen_fd >= 0) close(c->listen_fd);
  __atomic_sub_fetch(&total_pending, c->pending, __ATOMIC_SEQ_CST);
  for (op_t *o = c->head; o;) {
    op_t *next = o->next;
    free(o->calls);
    free(o);
    o = next;
  }
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

int ncclCommAbort(comm_t *c) {
  if (c) end_comm(c);
  return ncclSuccess;
}

int ncclCommDestroy(comm_t *c) {
  if (c) end_comm(c);
  return ncclSuccess;
}
