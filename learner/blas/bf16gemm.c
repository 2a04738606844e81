//go:build cgo && !purego

#include "bf16gemm.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bf16_packed {
	dnnl_engine_t eng;
	dnnl_memory_desc_t md; // the packed layout of the [k][n] weights
	dnnl_memory_t mem;
	int n, k;
};

struct bf16_prim {
	dnnl_primitive_t prim;
	dnnl_memory_desc_t src, dst, scratch;
	size_t scratch_bytes;
	const char *impl;
};

static void say(char *err, int errlen, const char *what, dnnl_status_t s) {
	snprintf(err, errlen, "oneDNN %s: status %d", what, (int)s);
}

// One CPU engine for the process, made on first use.
static dnnl_engine_t the_engine;
static dnnl_status_t engine_status;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void make_engine(void) { engine_status = dnnl_engine_create(&the_engine, dnnl_cpu, 0); }

static dnnl_engine_t engine(char *err, int errlen) {
	pthread_once(&engine_once, make_engine);
	if (engine_status != dnnl_success) {
		say(err, errlen, "engine_create", engine_status);
		return NULL;
	}
	return the_engine;
}

void bf16_version(char *buf, int len) {
	const dnnl_version_t *v = dnnl_version();
	snprintf(buf, len, "%d.%d.%d", v->major, v->minor, v->patch);
}

// matmul_pd is the primitive descriptor of [m][k] x [k][n] -> [m][n]
// (rows ldc apart) with weights in layout w.
static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng, int m, int k, int n, int ldc,
                               const dnnl_memory_desc_t *w, dnnl_memory_desc_t *src, dnnl_memory_desc_t *dst,
                               const_dnnl_primitive_attr_t attr) {
	dnnl_dims_t sd = {m, k}, dd = {m, n}, ds = {ldc, 1};
	dnnl_status_t s = dnnl_memory_desc_init_by_tag(src, 2, sd, dnnl_bf16, dnnl_ab);
	if (s != dnnl_success) return s;
	s = dnnl_memory_desc_init_by_strides(dst, 2, dd, dnnl_f32, ds);
	if (s != dnnl_success) return s;
	dnnl_matmul_desc_t md;
	s = dnnl_matmul_desc_init(&md, src, w, NULL, dst);
	if (s != dnnl_success) return s;
	return dnnl_primitive_desc_create(pd, &md, attr, eng, NULL);
}

bf16_packed *bf16_pack(const uint16_t *w, int n, int k, char *err, int errlen) {
	err[0] = 0;
	dnnl_engine_t eng = engine(err, errlen);
	if (eng == NULL) return NULL;
	omp_set_num_threads(1);
	// The layout the kernels choose for a product of 16 rows; products of
	// every other row count are made for this same layout (bf16_prim_new).
	dnnl_dims_t wd = {k, n};
	dnnl_memory_desc_t any, plain, src, dst;
	dnnl_memory_desc_init_by_tag(&any, 2, wd, dnnl_bf16, dnnl_format_tag_any);
	dnnl_memory_desc_init_by_tag(&plain, 2, wd, dnnl_bf16, dnnl_ba);
	dnnl_primitive_desc_t pd;
	dnnl_status_t s = matmul_pd(&pd, eng, 16, k, n, n, &any, &src, &dst, NULL);
	if (s != dnnl_success) {
		say(err, errlen, "matmul primitive for bfloat16", s);
		return NULL;
	}
	bf16_packed *p = calloc(1, sizeof *p);
	p->eng = eng;
	p->n = n;
	p->k = k;
	p->md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	dnnl_primitive_desc_destroy(pd);
	dnnl_memory_t from = NULL;
	dnnl_primitive_desc_t rpd = NULL;
	dnnl_primitive_t reorder = NULL;
	dnnl_stream_t st = NULL;
	if ((s = dnnl_memory_create(&p->mem, &p->md, eng, DNNL_MEMORY_ALLOCATE)) != dnnl_success ||
	    (s = dnnl_memory_create(&from, &plain, eng, (void *)w)) != dnnl_success ||
	    (s = dnnl_reorder_primitive_desc_create(&rpd, &plain, eng, &p->md, eng, NULL)) != dnnl_success ||
	    (s = dnnl_primitive_create(&reorder, rpd)) != dnnl_success ||
	    (s = dnnl_stream_create(&st, eng, dnnl_stream_default_flags)) != dnnl_success) {
		say(err, errlen, "packing the weights", s);
	} else {
		dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, p->mem}};
		if ((s = dnnl_primitive_execute(reorder, st, 2, args)) != dnnl_success ||
		    (s = dnnl_stream_wait(st)) != dnnl_success) {
			say(err, errlen, "packing the weights", s);
		}
	}
	if (st) dnnl_stream_destroy(st);
	if (reorder) dnnl_primitive_destroy(reorder);
	if (rpd) dnnl_primitive_desc_destroy(rpd);
	if (from) dnnl_memory_destroy(from);
	if (err[0] != 0) {
		bf16_free(p);
		return NULL;
	}
	return p;
}

void bf16_free(bf16_packed *p) {
	if (p == NULL) return;
	if (p->mem) dnnl_memory_destroy(p->mem);
	free(p);
}

bf16_prim *bf16_prim_new(const bf16_packed *p, int m, int ldc, char *err, int errlen) {
	err[0] = 0;
	omp_set_num_threads(1);
	bf16_prim *q = calloc(1, sizeof *q);
	// The scratchpad is the caller's (bf16_run allocates one a call): the
	// library's own is shared by every execution of a primitive, and the
	// column parts of a matrix run the same primitive at once.
	dnnl_primitive_attr_t attr;
	dnnl_status_t s = dnnl_primitive_attr_create(&attr);
	if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
	dnnl_primitive_desc_t pd;
	if (s == dnnl_success) s = matmul_pd(&pd, p->eng, m, p->k, p->n, ldc, &p->md, &q->src, &q->dst, attr);
	dnnl_primitive_attr_destroy(attr);
	if (s != dnnl_success) {
		say(err, errlen, "matmul primitive for the packed bfloat16 weights", s);
		free(q);
		return NULL;
	}
	const char *impl = "";
	dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
	q->impl = impl;
	q->scratch = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	q->scratch_bytes = dnnl_memory_desc_get_size(&q->scratch);
	s = dnnl_primitive_create(&q->prim, pd);
	dnnl_primitive_desc_destroy(pd);
	if (s != dnnl_success) {
		say(err, errlen, "primitive_create", s);
		free(q);
		return NULL;
	}
	return q;
}

void bf16_prim_free(bf16_prim *q) {
	if (q == NULL) return;
	dnnl_primitive_destroy(q->prim);
	free(q);
}

bf16_packed *bf16_layout(const bf16_packed *p) {
	bf16_packed *q = calloc(1, sizeof *q);
	*q = *p;
	q->mem = NULL;
	return q;
}

int bf16_same_layout(const bf16_packed *a, const bf16_packed *b) {
	return a->n == b->n && a->k == b->k && dnnl_memory_desc_equal(&a->md, &b->md);
}

const char *bf16_impl(const bf16_prim *q) { return q->impl; }

int bf16_run(const bf16_prim *q, const bf16_packed *p, const uint16_t *x, float *c) {
	// One thread: the Go side splits the columns among its goroutines.
	omp_set_num_threads(1);
	dnnl_memory_t src = NULL, dst = NULL, scratch = NULL;
	dnnl_stream_t st = NULL;
	void *buf = NULL;
	if (q->scratch_bytes > 0 && (buf = aligned_alloc(64, (q->scratch_bytes + 63) / 64 * 64)) == NULL) {
		return (int)dnnl_out_of_memory;
	}
	dnnl_status_t s;
	if ((s = dnnl_memory_create(&src, &q->src, p->eng, (void *)x)) == dnnl_success &&
	    (s = dnnl_memory_create(&dst, &q->dst, p->eng, c)) == dnnl_success &&
	    (s = dnnl_memory_create(&scratch, &q->scratch, p->eng, buf)) == dnnl_success &&
	    (s = dnnl_stream_create(&st, p->eng, dnnl_stream_default_flags)) == dnnl_success) {
		dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p->mem}, {DNNL_ARG_DST, dst},
		                           {DNNL_ARG_SCRATCHPAD, scratch}};
		if ((s = dnnl_primitive_execute(q->prim, st, 4, args)) == dnnl_success) s = dnnl_stream_wait(st);
	}
	if (st) dnnl_stream_destroy(st);
	if (scratch) dnnl_memory_destroy(scratch);
	free(buf);
	if (dst) dnnl_memory_destroy(dst);
	if (src) dnnl_memory_destroy(src);
	return (int)s;
}

void bf16_round(uint16_t *dst, const float *src, long n) {
	for (long i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &src[i], 4);
		if ((u & 0x7fffffff) > 0x7f800000) {
			dst[i] = (uint16_t)((u >> 16) | 0x40); // NaN stays a quiet NaN
		} else {
			dst[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
		}
	}
}
