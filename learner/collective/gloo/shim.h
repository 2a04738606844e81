// C interface to Gloo for cgo. Every call that can fail returns NULL on
// success or an error (kind and message) allocated with malloc, which the
// caller frees with aipo_gloo_free_error. No C++ exception crosses it.
#ifndef AIPO_GLOO_SHIM_H
#define AIPO_GLOO_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Kinds of error.
enum {
	AIPO_GLOO_IO = 1,       // gloo::IoException: a peer, the network or a timeout
	AIPO_GLOO_TIMEOUT = 2,  // an IoException that reports a timeout
	AIPO_GLOO_ENFORCE = 3,  // a Gloo assertion (bad arguments)
	AIPO_GLOO_OTHER = 4,    // any other exception, or out of memory
};

typedef struct aipo_gloo_error {
	int kind;
	char *msg;
} aipo_gloo_error;

typedef struct aipo_gloo aipo_gloo;

void aipo_gloo_free_error(aipo_gloo_error *e);

// aipo_gloo_new creates a TCP device bound to hostname (or to the address
// of the interface iface when it is non-empty), connects a full mesh of
// size ranks through the Go store behind store (a cgo.Handle), under key
// prefix, within connect_ms, and sets op_ms as the default operation
// timeout.
aipo_gloo_error *aipo_gloo_new(int rank, int size, uintptr_t store, const char *prefix,
		const char *hostname, const char *iface, int64_t connect_ms, int64_t op_ms, aipo_gloo **out);
void aipo_gloo_free(aipo_gloo *g);
// aipo_gloo_address returns, allocated with malloc, this rank's address
// of its pair with rank peer once connected ("IP:port", "[IPv6]:port"),
// or NULL when there is no such pair.
char *aipo_gloo_address(aipo_gloo *g, int peer);

aipo_gloo_error *aipo_gloo_allreduce(aipo_gloo *g, float *buf, size_t n, uint32_t tag, int64_t ms);
// reduce_scatter: each rank sends counts[j] elements of send to rank j
// (all-to-all), then sums what it received in rank order into recv.
aipo_gloo_error *aipo_gloo_reduce_scatter(aipo_gloo *g, const float *send, float *recv,
		const int64_t *counts, uint32_t tag, int64_t ms);
aipo_gloo_error *aipo_gloo_allgatherv(aipo_gloo *g, const float *send, float *recv,
		const int64_t *counts, uint32_t tag, int64_t ms);
aipo_gloo_error *aipo_gloo_alltoallv(aipo_gloo *g, const float *send, const int64_t *send_counts,
		float *recv, const int64_t *recv_counts, uint32_t tag, int64_t ms);
aipo_gloo_error *aipo_gloo_broadcast(aipo_gloo *g, void *buf, size_t bytes, int root, uint32_t tag, int64_t ms);
aipo_gloo_error *aipo_gloo_barrier(aipo_gloo *g, uint32_t tag, int64_t ms);

// Implemented in Go (store.go): the store calls of the Store subclass.
// Each returns NULL or an error message allocated with malloc.
char *aipoGlooStoreSet(uintptr_t h, char *key, int klen, char *val, int vlen);
char *aipoGlooStoreGet(uintptr_t h, char *key, int klen, int64_t ms, char **val, int *vlen);
char *aipoGlooStoreWait(uintptr_t h, char *keys, int *klens, int nkeys, int64_t ms);

#ifdef __cplusplus
}
#endif

#endif
