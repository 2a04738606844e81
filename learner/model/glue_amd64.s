//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels of element-wise glue. Each repeats, lane by lane, the
// float32 operations of its scalar Go loop in the same order (no FMA), so
// the results are the same bits. n is a multiple of 8.

DATA glue_one<>+0(SB)/4, $0x3f800000
DATA glue_one<>+4(SB)/4, $0x3f800000
DATA glue_one<>+8(SB)/4, $0x3f800000
DATA glue_one<>+12(SB)/4, $0x3f800000
DATA glue_one<>+16(SB)/4, $0x3f800000
DATA glue_one<>+20(SB)/4, $0x3f800000
DATA glue_one<>+24(SB)/4, $0x3f800000
DATA glue_one<>+28(SB)/4, $0x3f800000
GLOBL glue_one<>(SB), RODATA|NOPTR, $32

// func swigluFwdAVX2(h, sig, gate, u *float32, n int)
// sig holds exp(-g) on entry: s = 1/(1+sig); sig = s; h = g*s*u.
TEXT ·swigluFwdAVX2(SB), NOSPLIT, $0-40
	MOVQ h+0(FP), DI
	MOVQ sig+8(FP), SI
	MOVQ gate+16(FP), R8
	MOVQ u+24(FP), R9
	MOVQ n+32(FP), CX
	VMOVUPS glue_one<>(SB), Y15
	XORQ AX, AX

fwd_loop:
	CMPQ AX, CX
	JGE  fwd_done
	VMOVUPS (SI)(AX*4), Y0
	VADDPS  Y0, Y15, Y0        // 1 + e
	VDIVPS  Y0, Y15, Y0        // s = 1 / (1 + e)
	VMOVUPS Y0, (SI)(AX*4)
	VMOVUPS (R8)(AX*4), Y1
	VMULPS  Y0, Y1, Y1         // g*s
	VMOVUPS (R9)(AX*4), Y2
	VMULPS  Y2, Y1, Y1         // (g*s)*u
	VMOVUPS Y1, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     fwd_loop

fwd_done:
	VZEROUPPER
	RET

// func swigluRecAVX2(h, sig, gate, u *float32, n int)
// h = g*s*u with s = sig.
TEXT ·swigluRecAVX2(SB), NOSPLIT, $0-40
	MOVQ h+0(FP), DI
	MOVQ sig+8(FP), SI
	MOVQ gate+16(FP), R8
	MOVQ u+24(FP), R9
	MOVQ n+32(FP), CX
	XORQ AX, AX

rec_loop:
	CMPQ AX, CX
	JGE  rec_done
	VMOVUPS (R8)(AX*4), Y1
	VMOVUPS (SI)(AX*4), Y0
	VMULPS  Y0, Y1, Y1         // g*s
	VMOVUPS (R9)(AX*4), Y2
	VMULPS  Y2, Y1, Y1         // (g*s)*u
	VMOVUPS Y1, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     rec_loop

rec_done:
	VZEROUPPER
	RET

// func swigluBwdAVX2(dg, du, d, sig, gate, u *float32, n int)
// du = d*g*s; dg = d*u*s*(1 + g*(1-s)) with s = sig.
TEXT ·swigluBwdAVX2(SB), NOSPLIT, $0-56
	MOVQ dg+0(FP), DI
	MOVQ du+8(FP), R10
	MOVQ d+16(FP), R11
	MOVQ sig+24(FP), SI
	MOVQ gate+32(FP), R8
	MOVQ u+40(FP), R9
	MOVQ n+48(FP), CX
	VMOVUPS glue_one<>(SB), Y15
	XORQ AX, AX

bwd_loop:
	CMPQ AX, CX
	JGE  bwd_done
	VMOVUPS (R11)(AX*4), Y0    // d
	VMOVUPS (R8)(AX*4), Y1     // g
	VMOVUPS (SI)(AX*4), Y2     // s
	VMOVUPS (R9)(AX*4), Y3     // u
	VMULPS  Y1, Y0, Y4         // d*g
	VMULPS  Y2, Y4, Y4         // (d*g)*s
	VMOVUPS Y4, (R10)(AX*4)
	VMULPS  Y3, Y0, Y5         // d*u
	VMULPS  Y2, Y5, Y5         // (d*u)*s
	VSUBPS  Y2, Y15, Y6        // 1 - s
	VMULPS  Y6, Y1, Y6         // g*(1-s)
	VADDPS  Y6, Y15, Y6        // 1 + g*(1-s)
	VMULPS  Y6, Y5, Y5
	VMOVUPS Y5, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     bwd_loop

bwd_done:
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, n int, c float32)
// x *= c.
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS c+16(FP), Y15
	XORQ AX, AX

scale_loop:
	CMPQ AX, CX
	JGE  scale_done
	VMOVUPS (DI)(AX*4), Y0
	VMULPS  Y15, Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     scale_loop

scale_done:
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) (m float32, nan bool)
// The largest of x[0:n] by VMAXPS and whether any element is NaN. VMAXPS
// differs from Go's max only on NaN and on +0 against -0; the caller
// handles those cases itself.
TEXT ·maxAVX2(SB), NOSPLIT, $0-21
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Y0
	VMOVUPS Y0, Y4
	VXORPS  Y1, Y1, Y1
	MOVQ    $8, AX

max_loop:
	CMPQ AX, CX
	JGE  max_reduce
	VMOVUPS (SI)(AX*4), Y2
	VCMPPS  $3, Y2, Y2, Y3     // UNORD_Q: NaN lanes
	VORPS   Y3, Y1, Y1
	VMAXPS  Y2, Y0, Y0
	ADDQ    $8, AX
	JMP     max_loop

max_reduce:
	VCMPPS       $3, Y4, Y4, Y3 // the first block's NaNs
	VORPS        Y3, Y1, Y1
	VEXTRACTF128 $1, Y0, X2
	VMAXPS       X2, X0, X0
	VPERMILPS    $0x4e, X0, X2
	VMAXPS       X2, X0, X0
	VPERMILPS    $0xb1, X0, X2
	VMAXPS       X2, X0, X0
	MOVSS        X0, m+16(FP)
	VMOVMSKPS    Y1, BX
	TESTL        BX, BX
	SETNE        nan+20(FP)
	VZEROUPPER
	RET
