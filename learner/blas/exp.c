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

// Every multiply and add here rounds on its own, as in the functions it
// reproduces: the compiler must not fuse them into multiply-adds (GCC does
// by default, intrinsics included).
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>

#include "exp.h"

#define T512 __attribute__((target("avx512f")))

// exp64x8 is math.Exp of eight float64 lanes where the fast path covers
// them (see above); other lanes are -1.
static inline T512 __m512d exp64x8(__m512d x) {
	const __m512d log2e = _mm512_set1_pd(1.4426950408889634073599246810018920);
	const __m512d ln2u = _mm512_set1_pd(0.69314718055966295651160180568695068359375);
	const __m512d ln2l = _mm512_set1_pd(0.28235290563031577122588448175013436025525412068e-12);
	const __m512d c0 = _mm512_set1_pd(0.5), c8 = _mm512_set1_pd(1.0), c16 = _mm512_set1_pd(2.0);
	__mmask8 ok = _mm512_cmp_pd_mask(_mm512_abs_pd(x), _mm512_set1_pd(__builtin_inf()), _CMP_LT_OQ) &
		      _mm512_cmp_pd_mask(x, _mm512_set1_pd(7.09782712893384e+02), _CMP_LE_OQ);
	__m256i k = _mm512_cvtpd_epi32(_mm512_mul_pd(log2e, x));
	__m512d kf = _mm512_cvtepi32_pd(k);
	__m512d r = _mm512_fnmadd_pd(kf, ln2u, x);
	r = _mm512_fnmadd_pd(kf, ln2l, r);
	r = _mm512_mul_pd(r, _mm512_set1_pd(0.0625));
	__m512d p = _mm512_fmadd_pd(_mm512_set1_pd(2.4801587301587301587e-5), r, _mm512_set1_pd(1.9841269841269841270e-4));
	p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.3888888888888888889e-3));
	p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(8.3333333333333333333e-3));
	p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(4.1666666666666666667e-2));
	p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.6666666666666666667e-1));
	p = _mm512_fmadd_pd(p, r, c0);
	p = _mm512_fmadd_pd(p, r, c8);
	r = _mm512_mul_pd(r, p);
	for (int s = 0; s < 3; s++) {
		p = _mm512_add_pd(r, c16);
		r = _mm512_mul_pd(r, p);
	}
	p = _mm512_add_pd(r, c16);
	r = _mm512_fmadd_pd(r, p, c8);
	__m512i e = _mm512_add_epi64(_mm512_cvtepi32_epi64(k), _mm512_set1_epi64(0x3FF));
	__mmask8 normal = _mm512_cmpgt_epi64_mask(e, _mm512_setzero_si512()) & _mm512_cmpgt_epi64_mask(_mm512_set1_epi64(0x7FF), e);
	__m512d y = _mm512_mul_pd(r, _mm512_castsi512_pd(_mm512_slli_epi64(e, 52)));
	return _mm512_mask_blend_pd(ok & normal, _mm512_set1_pd(-1.0), y);
}

static T512 void expshifted512(double *dst, const float *src, long n, double shift, double scale) {
	const __m512d vshift = _mm512_set1_pd(shift), vscale = _mm512_set1_pd(scale);
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
		_mm512_mask_storeu_pd(dst + i, live, exp64x8(x));
	}
	__asm__ volatile("vzeroupper");
}

#define F32(bits) _mm512_castsi512_ps(_mm512_set1_epi32((int)(bits)))

// exp32shift512 is learner/model's expShiftSign (exp32 of each src[i], its
// sign flipped by neg, minus shift) sixteen lanes at a time: exp32's float32
// operations in its order where it takes its fast path (the same bits as
// its AVX2 kernel), 0 below -103.97208, +Inf above 88.72284, NaN as
// itself, and between those bounds and the fast range the float64 exp of
// math.Exp rounded to float32, as exp32Slow. Returns how many it wrote:
// all, or the elements before a block holding a value whose float64 exp
// the vector code does not cover (none in that band).
static T512 long exp32shift512(float *dst, const float *src, long n, float shift, unsigned neg) {
	const __m512 lo = F32(0xc2aeac4f), hi = F32(0x42b0c0a5), under = F32(0xc2cff1b4), over = F32(0x42b17218);
	const __m512 log2e = F32(0x3fb8aa3b), magic = F32(0x4b400000), ln2hi = F32(0x3f317200), ln2lo = F32(0x35bfbe8e);
	const __m512 one = F32(0x3f800000), c2 = F32(0x3f000000), c6 = F32(0x3e2aaaab), c24 = F32(0x3d2aaaab);
	const __m512 c120 = F32(0x3c088889), c720 = F32(0x3ab60b61), c5040 = F32(0x39500d01);
	const __m512i kexp = _mm512_set1_epi32(0x4b3fff81), sign = _mm512_set1_epi32((int)neg);
	const __m512 vshift = _mm512_set1_ps(shift);
	long i = 0;
	for (; i < n; i += 16) {
		__mmask16 live = i + 16 <= n ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
		__m512 x = _mm512_maskz_loadu_ps(live, src + i);
		x = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), sign));
		x = _mm512_sub_ps(x, vshift);
		__m512 f = _mm512_add_ps(_mm512_mul_ps(x, log2e), magic);
		__m512 two = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_castps_si512(f), kexp), 23));
		__m512 fn = _mm512_sub_ps(f, magic);
		__m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(fn, ln2hi)), _mm512_mul_ps(fn, ln2lo));
		__m512 p = _mm512_add_ps(_mm512_mul_ps(r, c5040), c720);
		p = _mm512_add_ps(_mm512_mul_ps(r, p), c120);
		p = _mm512_add_ps(_mm512_mul_ps(r, p), c24);
		p = _mm512_add_ps(_mm512_mul_ps(r, p), c6);
		p = _mm512_add_ps(_mm512_mul_ps(r, p), c2);
		p = _mm512_add_ps(_mm512_mul_ps(r, p), one);
		p = _mm512_add_ps(_mm512_mul_ps(r, p), one);
		__m512 y = _mm512_mul_ps(p, two);
		__mmask16 fast = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OS) & _mm512_cmp_ps_mask(x, hi, _CMP_LE_OS);
		__mmask16 zero = _mm512_cmp_ps_mask(x, under, _CMP_LT_OS);
		__mmask16 inf = _mm512_cmp_ps_mask(x, over, _CMP_GT_OS);
		__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
		__mmask16 slow = live & ~(fast | zero | inf | nan);
		y = _mm512_mask_blend_ps(zero, y, _mm512_setzero_ps());
		y = _mm512_mask_blend_ps(inf, y, _mm512_set1_ps(__builtin_inff()));
		y = _mm512_mask_blend_ps(nan, y, x);
		if (slow) {
			__m512d d0 = exp64x8(_mm512_cvtps_pd(_mm512_castps512_ps256(x)));
			__m512d d1 = exp64x8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
			if ((_mm512_cmp_pd_mask(d0, _mm512_setzero_pd(), _CMP_LT_OQ) & (__mmask8)slow) ||
			    (_mm512_cmp_pd_mask(d1, _mm512_setzero_pd(), _CMP_LT_OQ) & (__mmask8)(slow >> 8)))
				break;
			__m512 s = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(d0))),
								       _mm256_castps_pd(_mm512_cvtpd_ps(d1)), 1));
			y = _mm512_mask_blend_ps(slow, y, s);
		}
		_mm512_mask_storeu_ps(dst + i, live, y);
	}
	__asm__ volatile("vzeroupper");
	return i < n ? i : n;
}

int exp_level(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

long exp32shift(float *dst, const float *src, long n, float shift, unsigned neg) {
	return exp32shift512(dst, src, n, shift, neg);
}

void expshifted(double *dst, const float *src, long n, double shift, double scale) {
	expshifted512(dst, src, n, shift, scale);
}
