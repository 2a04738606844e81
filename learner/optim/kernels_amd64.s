//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels of the optimiser. applyAVX2 repeats, lane by lane, the
// float32 operations of kernel.apply's scalar loop in the same order (no
// FMA; VSQRTPS is the correctly rounded square root, as float32 of the
// float64 square root is), so the results are the same bits.

// func applyAVX2(data, grad, m, v *float32, n int, k *kernel)
// n is a multiple of 8.
TEXT ·applyAVX2(SB), NOSPLIT, $0-48
	MOVQ data+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), R10
	VBROADCASTSS 0(R10), Y8   // scale
	VBROADCASTSS 4(R10), Y9   // decay
	VBROADCASTSS 8(R10), Y10  // b1
	VBROADCASTSS 12(R10), Y11 // 1-b1
	VBROADCASTSS 16(R10), Y12 // b2
	VBROADCASTSS 20(R10), Y13 // 1-b2
	VBROADCASTSS 24(R10), Y14 // step size
	VBROADCASTSS 28(R10), Y15 // sqrt of the second moment's bias correction
	XORQ AX, AX

apply_loop:
	VMOVUPS (SI)(AX*4), Y0
	VMULPS Y8, Y0, Y0         // g = grad*scale
	VMOVUPS (R8)(AX*4), Y1
	VMULPS Y10, Y1, Y1        // m*b1
	VMULPS Y0, Y11, Y2        // (1-b1)*g
	VADDPS Y2, Y1, Y1         // mi
	VMOVUPS (R9)(AX*4), Y3
	VMULPS Y12, Y3, Y3        // v*b2
	VMULPS Y0, Y13, Y4        // (1-b2)*g
	VMULPS Y0, Y4, Y4         // ((1-b2)*g)*g
	VADDPS Y4, Y3, Y3         // vi
	VMOVUPS Y1, (R8)(AX*4)
	VMOVUPS Y3, (R9)(AX*4)
	VSQRTPS Y3, Y5
	VDIVPS Y15, Y5, Y5        // sqrt(vi)/bc2Sqrt
	VBROADCASTSS 32(R10), Y6
	VADDPS Y6, Y5, Y5         // denom = ... + eps
	VDIVPS Y5, Y1, Y6         // mi/denom
	VMULPS Y6, Y14, Y6        // stepSize*(mi/denom)
	VMOVUPS (DI)(AX*4), Y7
	VMULPS Y9, Y7, Y7         // data*decay
	VSUBPS Y6, Y7, Y7         // - stepSize*(mi/denom)
	VMOVUPS Y7, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JLT apply_loop
	VZEROUPPER
	RET

// func squaredSumLanesAVX2(acc *[16]float64, x *float32, n int)
// acc[j] += float64(x[i])^2 for i = j mod 16; n is a multiple of 16.
TEXT ·squaredSumLanesAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVUPD 0(DI), Y0
	VMOVUPD 32(DI), Y1
	VMOVUPD 64(DI), Y2
	VMOVUPD 96(DI), Y3
	SHLQ $2, CX
	ADDQ SI, CX // the end of g's prefix

sq_loop:
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 32(SI), Y6
	VCVTPS2PD 48(SI), Y7
	VMULPD Y4, Y4, Y4
	VMULPD Y5, Y5, Y5
	VMULPD Y6, Y6, Y6
	VMULPD Y7, Y7, Y7
	VADDPD Y4, Y0, Y0
	VADDPD Y5, Y1, Y1
	VADDPD Y6, Y2, Y2
	VADDPD Y7, Y3, Y3
	ADDQ $64, SI
	CMPQ SI, CX
	JLT sq_loop
	VMOVUPD Y0, 0(DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	VZEROUPPER
	RET
