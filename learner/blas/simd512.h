// AVX-512 helpers shared by the package's C kernels (rowdots.c, bf16kv.c).
#ifndef AIPO_SIMD512_H
#define AIPO_SIMD512_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define T512 __attribute__((target("avx512f")))

// hsum512 sums the 16 lanes of v by one fixed tree (lane l with l+8, then
// with l+4, l+2, l+1).
static inline T512 float hsum512(__m512 v) {
	__m256 lo = _mm512_castps512_ps256(v);
	__m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
	__m256 s8 = _mm256_add_ps(lo, hi);
	__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
	__m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
	__m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
	return _mm_cvtss_f32(s1);
}

// reduce4x512 sums the lanes of four accumulators at once, by the same
// tree as hsum512 (lane l with l+8, then with l+4, l+2, l+1), so each sum
// has hsum512's bits: a pair of accumulators' halves is added in one
// instruction, then four quarters, then within each quarter. It returns
// the four sums in order.
static inline T512 __m128 reduce4x512(__m512 a, __m512 b, __m512 c, __m512 d) {
	__m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
				  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
	__m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
				  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
	__m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
				 _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
	q = _mm512_add_ps(q, _mm512_permute_ps(q, _MM_SHUFFLE(1, 0, 3, 2)));
	q = _mm512_add_ps(q, _mm512_permute_ps(q, _MM_SHUFFLE(2, 3, 0, 1)));
	const __m512i lane0 = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
	return _mm512_castps512_ps128(_mm512_permutexvar_ps(lane0, q));
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
#endif
