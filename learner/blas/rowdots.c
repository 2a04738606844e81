//go:build cgo && !purego

// The fixed-order product behind RowDots (rowdots.go).
//
// Every output c[i][j] = sum over p of x[i][p]*w[j][p] is computed by one
// sequence of operations: a vector accumulator starts at zero and takes a
// fused multiply-add of each chunk of the two rows in order (16 floats with
// AVX-512, 8 with AVX2; the last chunk loaded masked, zeros past k), then
// its lanes are summed by one fixed tree. Outputs share loads but never an
// arithmetic operation, so an output's bits depend on its two rows and k
// alone: not on how many rows x or w has, nor on where the output falls in
// a tile. Tiles of several outputs exist only to load each chunk once for
// several accumulators.

#include <immintrin.h>
#include <stdint.h>

#include "rowdots.h"
#include "simd256.h"
#include "simd512.h"

#define PRAGMA_UNROLL _Pragma("GCC unroll 16")


// The loads of a chunk of w, whole and as the tail (n < the lane count
// values, zeros after): float32 rows load directly (masked for the tail),
// bfloat16 rows widen exactly as they load (the tail through a
// zero-padded copy).
static inline T512 __m512 ldw512_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline T512 __m512 tlw512_f32(const float *p, int n, __mmask16 mk) { return _mm512_maskz_loadu_ps(mk, p); }
static inline T512 __m512 ldw512_bf16(const uint16_t *p) { return w16(p); }
static inline T512 __m512 tlw512_bf16(const uint16_t *p, int n, __mmask16 mk) { return w16tail(p, n); }

static inline T256 __m256 ldw256_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline T256 __m256 tlw256_f32(const float *p, int n, __m256i mask) { return _mm256_maskload_ps(p, mask); }
static inline T256 __m256 ldw256_bf16(const uint16_t *p) { return widen8(p); }
static inline T256 __m256 tlw256_bf16(const uint16_t *p, int n, __m256i mask) { return widen8tail(p, n); }

// TILE512 defines a kernel of MR rows of w (of type WT, loaded by
// ldw512_W and tlw512_W) by NR rows of x. Whatever WT, an output takes the
// same operations on the same float32 values: a bfloat16 row's kernel
// gives the bits of the float32 kernel on the widened row.
#define TILE512(NAME, MR, NR, WT, W)                                                   \
	static T512 void NAME(int k, const float *x, int ldx, const WT *w, int ldw,         \
			      float *c, int ldc) {                                          \
		__m512 acc[NR][MR];                                                         \
		PRAGMA_UNROLL for (int i = 0; i < NR; i++) PRAGMA_UNROLL for (int j = 0; j < MR; j++) \
			acc[i][j] = _mm512_setzero_ps();                                    \
		int p = 0;                                                                  \
		for (; p + 16 <= k; p += 16) {                                              \
			__m512 wv[MR];                                                      \
			PRAGMA_UNROLL for (int j = 0; j < MR; j++) wv[j] = ldw512_##W(w + j * ldw + p); \
			PRAGMA_UNROLL for (int i = 0; i < NR; i++) {                        \
				__m512 xv = _mm512_loadu_ps(x + i * ldx + p);               \
				PRAGMA_UNROLL for (int j = 0; j < MR; j++)                  \
					acc[i][j] = _mm512_fmadd_ps(wv[j], xv, acc[i][j]);  \
			}                                                                   \
		}                                                                           \
		if (p < k) {                                                                \
			__mmask16 mk = (__mmask16)((1u << (k - p)) - 1u);                   \
			__m512 wv[MR];                                                      \
			PRAGMA_UNROLL for (int j = 0; j < MR; j++) wv[j] = tlw512_##W(w + j * ldw + p, k - p, mk); \
			PRAGMA_UNROLL for (int i = 0; i < NR; i++) {                        \
				__m512 xv = _mm512_maskz_loadu_ps(mk, x + i * ldx + p);     \
				PRAGMA_UNROLL for (int j = 0; j < MR; j++)                  \
					acc[i][j] = _mm512_fmadd_ps(wv[j], xv, acc[i][j]);  \
			}                                                                   \
		}                                                                           \
		PRAGMA_UNROLL for (int i = 0; i < NR; i++) {                                \
			int j = 0;                                                          \
			PRAGMA_UNROLL for (; j + 4 <= MR; j += 4)                           \
				_mm_storeu_ps(c + i * ldc + j, reduce4x512(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3])); \
			PRAGMA_UNROLL for (; j < MR; j++) c[i * ldc + j] = hsum512(acc[i][j]); \
		}                                                                           \
	}

// TILE256 is TILE512 with AVX2 vectors of 8 floats.
#define TILE256(NAME, MR, NR, WT, W)                                                   \
	static T256 void NAME(int k, const float *x, int ldx, const WT *w, int ldw,         \
			      float *c, int ldc, __m256i tailmask) {                        \
		__m256 acc[NR][MR];                                                         \
		PRAGMA_UNROLL for (int i = 0; i < NR; i++) PRAGMA_UNROLL for (int j = 0; j < MR; j++) \
			acc[i][j] = _mm256_setzero_ps();                                    \
		int p = 0;                                                                  \
		for (; p + 8 <= k; p += 8) {                                                \
			__m256 wv[MR];                                                      \
			PRAGMA_UNROLL for (int j = 0; j < MR; j++) wv[j] = ldw256_##W(w + j * ldw + p); \
			PRAGMA_UNROLL for (int i = 0; i < NR; i++) {                        \
				__m256 xv = _mm256_loadu_ps(x + i * ldx + p);               \
				PRAGMA_UNROLL for (int j = 0; j < MR; j++)                  \
					acc[i][j] = _mm256_fmadd_ps(wv[j], xv, acc[i][j]);  \
			}                                                                   \
		}                                                                           \
		if (p < k) {                                                                \
			__m256 wv[MR];                                                      \
			PRAGMA_UNROLL for (int j = 0; j < MR; j++) wv[j] = tlw256_##W(w + j * ldw + p, k - p, tailmask); \
			PRAGMA_UNROLL for (int i = 0; i < NR; i++) {                        \
				__m256 xv = _mm256_maskload_ps(x + i * ldx + p, tailmask);  \
				PRAGMA_UNROLL for (int j = 0; j < MR; j++)                  \
					acc[i][j] = _mm256_fmadd_ps(wv[j], xv, acc[i][j]);  \
			}                                                                   \
		}                                                                           \
		PRAGMA_UNROLL for (int i = 0; i < NR; i++) PRAGMA_UNROLL for (int j = 0; j < MR; j++) \
			c[i * ldc + j] = hsum256(acc[i][j]);                                \
	}

// AVX-512: 6x4 tiles hold 24 accumulators, the 6 chunks of w and one of x
// in 31 of the 32 vector registers; 4-row and single tiles take the rows
// of w left over.
TILE512(tile512_6x4, 6, 4, float, f32)
TILE512(tile512_6x1, 6, 1, float, f32)
TILE512(tile512_4x4, 4, 4, float, f32)
TILE512(tile512_4x1, 4, 1, float, f32)
TILE512(tile512_1x1, 1, 1, float, f32)

// AVX2: 16 vector registers; 3x4 tiles use 12 accumulators, 3 chunks of w
// and one of x (each chunk of w serves 4 rows of x); 3x1 tiles take the
// rows of x left over beside them, 4x1 tiles the rows of a product of
// fewer than 4 (ROWDOTS256).
TILE256(tile256_3x4, 3, 4, float, f32)
TILE256(tile256_3x1, 3, 1, float, f32)
TILE256(tile256_4x1, 4, 1, float, f32)
TILE256(tile256_1x1, 1, 1, float, f32)

TILE512(tile512w16_6x4, 6, 4, uint16_t, bf16)
TILE512(tile512w16_6x1, 6, 1, uint16_t, bf16)
TILE512(tile512w16_4x4, 4, 4, uint16_t, bf16)
TILE512(tile512w16_4x1, 4, 1, uint16_t, bf16)
TILE512(tile512w16_1x1, 1, 1, uint16_t, bf16)
// AVX2 with bfloat16 weights: the same tiles, each widening serving 4 rows
// of x.
TILE256(tile256w16_3x4, 3, 4, uint16_t, bf16)
TILE256(tile256w16_3x1, 3, 1, uint16_t, bf16)
TILE256(tile256w16_4x1, 4, 1, uint16_t, bf16)
TILE256(tile256w16_1x1, 1, 1, uint16_t, bf16)

// ROWDOTS512 and ROWDOTS256 define the drivers, for weights of type WT
// and the tiles named PREFIX_MRxNR.
#define ROWDOTS512(NAME, WT, T6x4, T6x1, T4x4, T4x1, T1x1)                                  \
	static T512 void NAME(int n, int m, int k, const float *x, int ldx, const WT *w, int ldw, \
			      float *c, int ldc) {                                          \
		int j = 0;                                                                  \
		for (; j + 6 <= m; j += 6) {                                                \
			int i = 0;                                                          \
			for (; i + 4 <= n; i += 4)                                          \
				T6x4(k, x + (int64_t)i * ldx, ldx, w + (int64_t)j * ldw, ldw, c + (int64_t)i * ldc + j, ldc); \
			for (; i < n; i++)                                                  \
				T6x1(k, x + (int64_t)i * ldx, ldx, w + (int64_t)j * ldw, ldw, c + (int64_t)i * ldc + j, ldc); \
		}                                                                           \
		for (; j + 4 <= m; j += 4) {                                                \
			int i = 0;                                                          \
			for (; i + 4 <= n; i += 4)                                          \
				T4x4(k, x + (int64_t)i * ldx, ldx, w + (int64_t)j * ldw, ldw, c + (int64_t)i * ldc + j, ldc); \
			for (; i < n; i++)                                                  \
				T4x1(k, x + (int64_t)i * ldx, ldx, w + (int64_t)j * ldw, ldw, c + (int64_t)i * ldc + j, ldc); \
		}                                                                           \
		for (; j < m; j++)                                                          \
			for (int i = 0; i < n; i++)                                         \
				T1x1(k, x + (int64_t)i * ldx, ldx, w + (int64_t)j * ldw, ldw, c + (int64_t)i * ldc + j, ldc); \
	}

// ROWDOTS256's rows of x go four at a time through tiles of MR rows of w
// by 4 (TMx4), the rows left over beside them through tiles of MR by 1
// (TMx1), so that w is read once; with fewer than 4 rows in all (every
// step at batch 1) the rows go through tiles of 4 rows of w by 1 (T4x1),
// whose four weight streams suit a lone row better. Each output takes the
// same operations in any of them.
#define ROWDOTS256(NAME, WT, MR, TMx4, TMx1, T4x1, T1x1)                                    \
	static T256 void NAME(int n, int m, int k, const float *x, int ldx, const WT *w, int ldw, \
			      float *c, int ldc) {                                          \
		int32_t lanes[8];                                                           \
		for (int l = 0; l < 8; l++) lanes[l] = l < (k % 8) ? -1 : 0;               \
		__m256i tail = _mm256_loadu_si256((const __m256i *)lanes);                 \
		int j = 0;                                                                  \
		if (n >= 4) {                                                               \
			for (; j + MR <= m; j += MR) {                                      \
				int i = 0;                                                  \
				for (; i + 4 <= n; i += 4)                                  \
					TMx4(k, x + (int64_t)i * ldx, ldx, w + (int64_t)j * ldw, ldw, c + (int64_t)i * ldc + j, ldc, tail); \
				for (; i < n; i++)                                          \
					TMx1(k, x + (int64_t)i * ldx, ldx, w + (int64_t)j * ldw, ldw, c + (int64_t)i * ldc + j, ldc, tail); \
			}                                                                   \
		} else {                                                                    \
			for (; j + 4 <= m; j += 4)                                          \
				for (int i = 0; i < n; i++)                                 \
					T4x1(k, x + (int64_t)i * ldx, ldx, w + (int64_t)j * ldw, ldw, c + (int64_t)i * ldc + j, ldc, tail); \
		}                                                                           \
		for (; j < m; j++)                                                          \
			for (int i = 0; i < n; i++)                                         \
				T1x1(k, x + (int64_t)i * ldx, ldx, w + (int64_t)j * ldw, ldw, c + (int64_t)i * ldc + j, ldc, tail); \
	}

// The w rows are the outer loop: a tile of 6 (or 4) of them stays in the
// first level cache while every row of x passes, so w, the large operand of
// a decode step, is read from memory once.
ROWDOTS512(rowdots512, float, tile512_6x4, tile512_6x1, tile512_4x4, tile512_4x1, tile512_1x1)
ROWDOTS512(rowdots512w16, uint16_t, tile512w16_6x4, tile512w16_6x1, tile512w16_4x4, tile512w16_4x1, tile512w16_1x1)
ROWDOTS256(rowdots256, float, 3, tile256_3x4, tile256_3x1, tile256_4x1, tile256_1x1)
ROWDOTS256(rowdots256w16, uint16_t, 3, tile256w16_3x4, tile256w16_3x1, tile256w16_4x1, tile256w16_1x1)

int rowdots_level(void) {
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f")) return ROWDOTS_AVX512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ROWDOTS_AVX2;
	return ROWDOTS_NONE;
}

void rowdots(int level, int n, int m, int k, const float *x, int ldx, const float *w, int ldw, float *c,
	     int ldc) {
	if (level == ROWDOTS_AVX512)
		rowdots512(n, m, k, x, ldx, w, ldw, c, ldc);
	else
		rowdots256(n, m, k, x, ldx, w, ldw, c, ldc);
	// Go's scalar float code is SSE encoded: leave no dirty upper halves.
	__asm__ volatile("vzeroupper");
}

void rowdots_bf16(int level, int n, int m, int k, const float *x, int ldx, const uint16_t *w, int ldw, float *c,
		  int ldc) {
	if (level == ROWDOTS_AVX512)
		rowdots512w16(n, m, k, x, ldx, w, ldw, c, ldc);
	else
		rowdots256w16(n, m, k, x, ldx, w, ldw, c, ldc);
	__asm__ volatile("vzeroupper");
}
