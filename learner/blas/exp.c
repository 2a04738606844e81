//go:build cgo && !purego

// The vectorised exp of ExpShifted (exp.go).
//
// Go's math.Exp on amd64 (math/exp_amd64.s, Go 1.26) computes exp(x) as
// 2^k * e^r with k = round(x*log2(e)), r = x - k*ln2 in two fused steps, a
// Taylor polynomial of r/16 by fused multiply-adds, four squarings of
// (1 + p) written as p*(p+2) and a final fused step, then a multiply by 2^k
// built in the exponent bits. Every one of those operations is an IEEE
// operation with one rounding, so doing the same ones eight lanes at a
// time gives the same bits. Lanes the fast path does not cover (not
// finite, overflow, results below the normal range) are marked with -1,
// a value exp never takes, for the caller to compute with math.Exp.

#include <immintrin.h>

#include "exp.h"

#define T512 __attribute__((target("avx512f")))

static T512 void expshifted512(double *dst, const float *src, long n, double shift, double scale) {
	const __m512d vshift = _mm512_set1_pd(shift), vscale = _mm512_set1_pd(scale);
	const __m512d log2e = _mm512_set1_pd(1.4426950408889634073599246810018920);
	const __m512d ln2u = _mm512_set1_pd(0.69314718055966295651160180568695068359375);
	const __m512d ln2l = _mm512_set1_pd(0.28235290563031577122588448175013436025525412068e-12);
	const __m512d overflow = _mm512_set1_pd(7.09782712893384e+02);
	const __m512d sixteenth = _mm512_set1_pd(0.0625);
	const __m512d c0 = _mm512_set1_pd(0.5), c8 = _mm512_set1_pd(1.0), c16 = _mm512_set1_pd(2.0);
	const __m512d c24 = _mm512_set1_pd(1.6666666666666666667e-1);
	const __m512d c32 = _mm512_set1_pd(4.1666666666666666667e-2);
	const __m512d c40 = _mm512_set1_pd(8.3333333333333333333e-3);
	const __m512d c48 = _mm512_set1_pd(1.3888888888888888889e-3);
	const __m512d c56 = _mm512_set1_pd(1.9841269841269841270e-4);
	const __m512d c64 = _mm512_set1_pd(2.4801587301587301587e-5);
	const __m512d inf = _mm512_set1_pd(__builtin_inf());
	const __m512d mark = _mm512_set1_pd(-1.0);
	const __m512i bias = _mm512_set1_epi64(0x3FF), zero = _mm512_setzero_si512(), over = _mm512_set1_epi64(0x7FF);
	for (long i = 0; i < n; i += 8) {
		__mmask8 live = 0xFF;
		__m256 v;
		if (i + 8 <= n) {
			v = _mm256_loadu_ps(src + i);
		} else {
			float tail[8] = {0};
			for (long j = i; j < n; j++) tail[j - i] = src[j];
			v = _mm256_loadu_ps(tail);
			live = (__mmask8)((1u << (n - i)) - 1u);
		}
		__m512d x = _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(v), vshift), vscale);
		// Finite (|x| < inf) and not above the overflow bound.
		__mmask8 ok = _mm512_cmp_pd_mask(_mm512_abs_pd(x), inf, _CMP_LT_OQ) & _mm512_cmp_pd_mask(x, overflow, _CMP_LE_OQ);
		__m256i k = _mm512_cvtpd_epi32(_mm512_mul_pd(log2e, x));
		__m512d kf = _mm512_cvtepi32_pd(k);
		__m512d r = _mm512_fnmadd_pd(kf, ln2u, x);
		r = _mm512_fnmadd_pd(kf, ln2l, r);
		r = _mm512_mul_pd(r, sixteenth);
		__m512d p = _mm512_fmadd_pd(c64, r, c56);
		p = _mm512_fmadd_pd(p, r, c48);
		p = _mm512_fmadd_pd(p, r, c40);
		p = _mm512_fmadd_pd(p, r, c32);
		p = _mm512_fmadd_pd(p, r, c24);
		p = _mm512_fmadd_pd(p, r, c0);
		p = _mm512_fmadd_pd(p, r, c8);
		r = _mm512_mul_pd(r, p);
		p = _mm512_add_pd(r, c16);
		r = _mm512_mul_pd(r, p);
		p = _mm512_add_pd(r, c16);
		r = _mm512_mul_pd(r, p);
		p = _mm512_add_pd(r, c16);
		r = _mm512_mul_pd(r, p);
		p = _mm512_add_pd(r, c16);
		r = _mm512_fmadd_pd(r, p, c8);
		// 2^k for a biased exponent in the normal range [1, 0x7FE].
		__m512i e = _mm512_add_epi64(_mm512_cvtepi32_epi64(k), bias);
		__mmask8 normal = _mm512_cmpgt_epi64_mask(e, zero) & _mm512_cmpgt_epi64_mask(over, e);
		__m512d scale2 = _mm512_castsi512_pd(_mm512_slli_epi64(e, 52));
		__m512d y = _mm512_mask_blend_pd(ok & normal, mark, _mm512_mul_pd(r, scale2));
		_mm512_mask_storeu_pd(dst + i, live, y);
	}
	__asm__ volatile("vzeroupper");
}

int exp_level(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

void expshifted(double *dst, const float *src, long n, double shift, double scale) {
	expshifted512(dst, src, n, shift, scale);
}
