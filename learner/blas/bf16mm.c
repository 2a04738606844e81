//go:build cgo && !purego

#include "bf16mm.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

// One CPU engine for these products, made on first use.
static dnnl_engine_t mm_engine;
static dnnl_status_t mm_engine_status;
static pthread_once_t mm_engine_once = PTHREAD_ONCE_INIT;

static void make_mm_engine(void) { mm_engine_status = dnnl_engine_create(&mm_engine, dnnl_cpu, 0); }

static int fail(char *err, int errlen, const char *what, dnnl_status_t s) {
	snprintf(err, errlen, "oneDNN %s: status %d", what, (int)s);
	return (int)s == 0 ? -1 : (int)s;
}

int bf16mm(int ta, int tb, int m, int n, int k, const uint16_t *a, long lda, const uint16_t *b, long ldb, float beta,
	   float *c, long ldc, const char **impl, char *err, int errlen) {
	err[0] = 0;
	pthread_once(&mm_engine_once, make_mm_engine);
	if (mm_engine_status != dnnl_success) return fail(err, errlen, "engine_create", mm_engine_status);
	dnnl_engine_t eng = mm_engine;
	// One thread: the Go side splits the columns among its goroutines.
	omp_set_num_threads(1);
	dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
	dnnl_dims_t as = {lda, 1}, bs = {ldb, 1}, cs = {ldc, 1};
	if (ta) {
		as[0] = 1;
		as[1] = lda;
	}
	if (tb) {
		bs[0] = 1;
		bs[1] = ldb;
	}
	dnnl_memory_desc_t amd, bmd, cmd;
	dnnl_status_t s;
	if ((s = dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_bf16, as)) != dnnl_success ||
	    (s = dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_bf16, bs)) != dnnl_success ||
	    (s = dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs)) != dnnl_success) {
		return fail(err, errlen, "memory_desc_init", s);
	}
	dnnl_matmul_desc_t md;
	if ((s = dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd)) != dnnl_success) return fail(err, errlen, "matmul_desc_init", s);
	// The scratchpad is the caller's: the library's own would be shared by
	// every execution of the primitive, and the column parts run at once.
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	if ((s = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
	    (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success) {
		if (attr) dnnl_primitive_attr_destroy(attr);
		return fail(err, errlen, "primitive_attr", s);
	}
	if (beta != 0) {
		if ((s = dnnl_post_ops_create(&po)) != dnnl_success || (s = dnnl_post_ops_append_sum(po, beta)) != dnnl_success ||
		    (s = dnnl_primitive_attr_set_post_ops(attr, po)) != dnnl_success) {
			if (po) dnnl_post_ops_destroy(po);
			dnnl_primitive_attr_destroy(attr);
			return fail(err, errlen, "sum post-op", s);
		}
		dnnl_post_ops_destroy(po);
	}
	dnnl_primitive_desc_t pd = NULL;
	s = dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL);
	dnnl_primitive_attr_destroy(attr);
	if (s != dnnl_success) return fail(err, errlen, "matmul primitive for bfloat16", s);
	if (impl != NULL) {
		const char *name = "";
		dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
		*impl = name;
	}
	const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	size_t sbytes = dnnl_memory_desc_get_size(smd);
	dnnl_primitive_t prim = NULL;
	dnnl_memory_t am = NULL, bm = NULL, cm = NULL, sm = NULL;
	dnnl_stream_t st = NULL;
	void *buf = NULL;
	if (sbytes > 0 && (buf = aligned_alloc(64, (sbytes + 63) / 64 * 64)) == NULL) {
		dnnl_primitive_desc_destroy(pd);
		return fail(err, errlen, "scratchpad", dnnl_out_of_memory);
	}
	if ((s = dnnl_primitive_create(&prim, pd)) == dnnl_success &&
	    (s = dnnl_memory_create(&am, &amd, eng, (void *)a)) == dnnl_success &&
	    (s = dnnl_memory_create(&bm, &bmd, eng, (void *)b)) == dnnl_success &&
	    (s = dnnl_memory_create(&cm, &cmd, eng, c)) == dnnl_success &&
	    (s = dnnl_memory_create(&sm, smd, eng, buf)) == dnnl_success &&
	    (s = dnnl_stream_create(&st, eng, dnnl_stream_default_flags)) == dnnl_success) {
		dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}};
		if ((s = dnnl_primitive_execute(prim, st, 4, args)) == dnnl_success) s = dnnl_stream_wait(st);
	}
	if (s != dnnl_success) fail(err, errlen, "bfloat16 matmul", s);
	if (st) dnnl_stream_destroy(st);
	if (sm) dnnl_memory_destroy(sm);
	if (cm) dnnl_memory_destroy(cm);
	if (bm) dnnl_memory_destroy(bm);
	if (am) dnnl_memory_destroy(am);
	if (prim) dnnl_primitive_destroy(prim);
	dnnl_primitive_desc_destroy(pd);
	free(buf);
	return (int)s;
}
