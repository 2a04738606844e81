// AVX2 helpers shared by the package's C kernels (rowdots.c, bf16kv.c).
#ifndef AIPO_SIMD256_H
#define AIPO_SIMD256_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define T256 __attribute__((target("avx2,fma")))

// hsum256 sums the 8 lanes of v by one fixed tree (lane l with l+4, then
// with l+2, l+1).
static inline T256 float hsum256(__m256 v) {
	__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	__m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
	__m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
	return _mm_cvtss_f32(s1);
}

// widen8 widens the 8 bfloat16 values at p to float32 (exactly: a
// bfloat16 value is the high half of a float32).
static inline T256 __m256 widen8(const uint16_t *p) {
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// widen8tail widens the first n < 8 bfloat16 values at p, zeros after.
static inline T256 __m256 widen8tail(const uint16_t *p, int n) {
	uint16_t buf[8] = {0};
	memcpy(buf, p, (size_t)n * 2);
	return widen8(buf);
}
#endif
