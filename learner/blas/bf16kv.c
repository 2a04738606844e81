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
#include "simd512.h"

static inline float widen1(uint16_t h) {
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// w16 widens the 16 bfloat16 values at p.
static inline T512 __m512 w16(const uint16_t *p) {
	__m256i h = _mm256_loadu_si256((const __m256i *)p);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// w16tail widens the first n < 16 bfloat16 values at p, zeros after.
static inline T512 __m512 w16tail(const uint16_t *p, int n) {
	uint16_t buf[16] = {0};
	memcpy(buf, p, (size_t)n * 2);
	return w16(buf);
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

int bf16kv_avx512(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f");
}

void bf16kv_nt(int vec, int m, int n, int k, float alpha, const float *a, long lda, const uint16_t *b, long ldb,
	       float *c, long ldc) {
	if (vec) {
		nt512(m, n, k, alpha, a, lda, b, ldb, c, ldc);
		// Go's scalar float code is SSE encoded: leave no dirty upper halves.
		__asm__ volatile("vzeroupper");
	} else {
		nt_scalar(m, n, k, alpha, a, lda, b, ldb, c, ldc);
	}
}

void bf16kv_nn(int vec, int m, int n, int k, const float *a, long lda, const uint16_t *b, long ldb, float *c,
	       long ldc) {
	if (vec) {
		nn512(m, n, k, a, lda, b, ldb, c, ldc);
		__asm__ volatile("vzeroupper");
	} else {
		nn_scalar(m, n, k, a, lda, b, ldb, c, ldc);
	}
}
