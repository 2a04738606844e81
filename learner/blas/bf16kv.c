//go:build cgo && !purego

// Products of float32 rows with bfloat16 rows, float32 results: the two
// products of attention over a bfloat16 KV cache (see bf16kv.go). A
// bfloat16 value widens to float32 exactly (its 16 bits become the high
// half), so these are float32 products of the cached values; only the
// order of the additions is this file's.

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "bf16gemm.h"
#include "simd256.h"
#include "simd512.h"

static inline float widen1(uint16_t h) {
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// dot512 is one output of the NT product: a row of a with a row of b,
// 16 lanes at a time, the last chunk masked.
static inline T512 float dot512(int k, const float *a, const uint16_t *b) {
	__m512 acc = _mm512_setzero_ps();
	int p = 0;
	for (; p + 16 <= k; p += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), w16(b + p), acc);
	if (p < k) {
		__mmask16 m = (__mmask16)((1u << (k - p)) - 1);
		acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + p), w16tail(b + p, k - p), acc);
	}
	return hsum512(acc);
}

static T512 void nt512(int m, int n, int k, float alpha, const float *a, long lda, const uint16_t *b, long ldb,
		       float *c, long ldc) {
	for (int i = 0; i < m; i++) {
		const float *ai = a + (long)i * lda;
		float *ci = c + (long)i * ldc;
		int j = 0;
		// Four keys at a time: one load of a's chunk feeds four
		// accumulators; each output is still its own sum, in dot512's
		// order.
		for (; j + 4 <= n; j += 4) {
			const uint16_t *b0 = b + (long)j * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
			__m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
			int p = 0;
			for (; p + 16 <= k; p += 16) {
				__m512 x = _mm512_loadu_ps(ai + p);
				c0 = _mm512_fmadd_ps(x, w16(b0 + p), c0);
				c1 = _mm512_fmadd_ps(x, w16(b1 + p), c1);
				c2 = _mm512_fmadd_ps(x, w16(b2 + p), c2);
				c3 = _mm512_fmadd_ps(x, w16(b3 + p), c3);
			}
			if (p < k) {
				__m512 x = _mm512_maskz_loadu_ps((__mmask16)((1u << (k - p)) - 1), ai + p);
				c0 = _mm512_fmadd_ps(x, w16tail(b0 + p, k - p), c0);
				c1 = _mm512_fmadd_ps(x, w16tail(b1 + p, k - p), c1);
				c2 = _mm512_fmadd_ps(x, w16tail(b2 + p, k - p), c2);
				c3 = _mm512_fmadd_ps(x, w16tail(b3 + p, k - p), c3);
			}
			__m128 sums = _mm_mul_ps(_mm_set1_ps(alpha), reduce4x512(c0, c1, c2, c3));
			_mm_storeu_ps(ci + j, sums);
		}
		for (; j < n; j++) ci[j] = alpha * dot512(k, ai, b + (long)j * ldb);
	}
}

// nn512 keeps 64 columns of an output row in four accumulators while it
// runs down the k rows of b; columns past the last whole 16 are summed
// one at a time in the same order.
static T512 void nn512(int m, int n, int k, const float *a, long lda, const uint16_t *b, long ldb, float *c,
		       long ldc) {
	int nv = n & ~15;
	for (int i = 0; i < m; i++) {
		const float *ai = a + (long)i * lda;
		float *ci = c + (long)i * ldc;
		for (int q = 0; q < nv; q += 64) {
			int w = nv - q < 64 ? (nv - q) / 16 : 4;
			__m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
			for (int p = 0; p < k; p++) {
				__m512 s = _mm512_set1_ps(ai[p]);
				const uint16_t *bp = b + (long)p * ldb + q;
				for (int v = 0; v < w; v++) acc[v] = _mm512_fmadd_ps(s, w16(bp + 16 * v), acc[v]);
			}
			for (int v = 0; v < w; v++) _mm512_storeu_ps(ci + q + 16 * v, acc[v]);
		}
		for (int q = nv; q < n; q++) {
			float s = 0;
			for (int p = 0; p < k; p++) s += ai[p] * widen1(b[(long)p * ldb + q]);
			ci[q] = s;
		}
	}
}

// The AVX2 kernels: nt512 and nn512 with 8 lanes.
static inline T256 __m256 a8tail(const float *p, int n) {
	float buf[8] = {0};
	memcpy(buf, p, (size_t)n * 4);
	return _mm256_loadu_ps(buf);
}

// nt256 is nt512 on 8 lanes: four keys at a time share a's chunk, each
// output its own accumulator and the same tree.
static T256 void nt256(int m, int n, int k, float alpha, const float *a, long lda, const uint16_t *b, long ldb,
		       float *c, long ldc) {
	for (int i = 0; i < m; i++) {
		const float *ai = a + (long)i * lda;
		float *ci = c + (long)i * ldc;
		int j = 0;
		for (; j + 4 <= n; j += 4) {
			const uint16_t *b0 = b + (long)j * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
			__m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
			int p = 0;
			for (; p + 8 <= k; p += 8) {
				__m256 x = _mm256_loadu_ps(ai + p);
				c0 = _mm256_fmadd_ps(x, widen8(b0 + p), c0);
				c1 = _mm256_fmadd_ps(x, widen8(b1 + p), c1);
				c2 = _mm256_fmadd_ps(x, widen8(b2 + p), c2);
				c3 = _mm256_fmadd_ps(x, widen8(b3 + p), c3);
			}
			if (p < k) {
				__m256 x = a8tail(ai + p, k - p);
				c0 = _mm256_fmadd_ps(x, widen8tail(b0 + p, k - p), c0);
				c1 = _mm256_fmadd_ps(x, widen8tail(b1 + p, k - p), c1);
				c2 = _mm256_fmadd_ps(x, widen8tail(b2 + p, k - p), c2);
				c3 = _mm256_fmadd_ps(x, widen8tail(b3 + p, k - p), c3);
			}
			ci[j] = alpha * hsum256(c0);
			ci[j + 1] = alpha * hsum256(c1);
			ci[j + 2] = alpha * hsum256(c2);
			ci[j + 3] = alpha * hsum256(c3);
		}
		for (; j < n; j++) {
			const uint16_t *bj = b + (long)j * ldb;
			__m256 acc = _mm256_setzero_ps();
			int p = 0;
			for (; p + 8 <= k; p += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(ai + p), widen8(bj + p), acc);
			if (p < k) acc = _mm256_fmadd_ps(a8tail(ai + p, k - p), widen8tail(bj + p, k - p), acc);
			ci[j] = alpha * hsum256(acc);
		}
	}
}

// nn256 is nn512 on 8 lanes: 32 columns of an output row in four
// accumulators down the k rows of b, the columns past the last whole 8
// one at a time in the same order.
static T256 void nn256(int m, int n, int k, const float *a, long lda, const uint16_t *b, long ldb, float *c,
		       long ldc) {
	int nv = n & ~7;
	for (int i = 0; i < m; i++) {
		const float *ai = a + (long)i * lda;
		float *ci = c + (long)i * ldc;
		for (int q = 0; q < nv; q += 32) {
			int w = nv - q < 32 ? (nv - q) / 8 : 4;
			__m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
			for (int p = 0; p < k; p++) {
				__m256 s = _mm256_set1_ps(ai[p]);
				const uint16_t *bp = b + (long)p * ldb + q;
				for (int v = 0; v < w; v++) acc[v] = _mm256_fmadd_ps(s, widen8(bp + 8 * v), acc[v]);
			}
			for (int v = 0; v < w; v++) _mm256_storeu_ps(ci + q + 8 * v, acc[v]);
		}
		for (int q = nv; q < n; q++) {
			float s = 0;
			for (int p = 0; p < k; p++) s += ai[p] * widen1(b[(long)p * ldb + q]);
			ci[q] = s;
		}
	}
}

static void nt_scalar(int m, int n, int k, float alpha, const float *a, long lda, const uint16_t *b, long ldb,
		      float *c, long ldc) {
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			float s = 0;
			for (int p = 0; p < k; p++) s += a[(long)i * lda + p] * widen1(b[(long)j * ldb + p]);
			c[(long)i * ldc + j] = alpha * s;
		}
}

static void nn_scalar(int m, int n, int k, const float *a, long lda, const uint16_t *b, long ldb, float *c,
		      long ldc) {
	for (int i = 0; i < m; i++)
		for (int q = 0; q < n; q++) {
			float s = 0;
			for (int p = 0; p < k; p++) s += a[(long)i * lda + p] * widen1(b[(long)p * ldb + q]);
			c[(long)i * ldc + q] = s;
		}
}

int bf16kv_level(void) {
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f")) return BF16KV_AVX512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return BF16KV_AVX2;
	return BF16KV_C;
}

void bf16kv_nt(int vec, int m, int n, int k, float alpha, const float *a, long lda, const uint16_t *b, long ldb,
	       float *c, long ldc) {
	if (vec == BF16KV_AVX512 || vec == BF16KV_AVX2) {
		if (vec == BF16KV_AVX512)
			nt512(m, n, k, alpha, a, lda, b, ldb, c, ldc);
		else
			nt256(m, n, k, alpha, a, lda, b, ldb, c, ldc);
		// Go's scalar float code is SSE encoded: leave no dirty upper halves.
		__asm__ volatile("vzeroupper");
	} else {
		nt_scalar(m, n, k, alpha, a, lda, b, ldb, c, ldc);
	}
}

void bf16kv_nn(int vec, int m, int n, int k, const float *a, long lda, const uint16_t *b, long ldb, float *c,
	       long ldc) {
	if (vec == BF16KV_AVX512 || vec == BF16KV_AVX2) {
		if (vec == BF16KV_AVX512)
			nn512(m, n, k, a, lda, b, ldb, c, ldc);
		else
			nn256(m, n, k, a, lda, b, ldb, c, ldc);
		__asm__ volatile("vzeroupper");
	} else {
		nn_scalar(m, n, k, a, lda, b, ldb, c, ldc);
	}
}
