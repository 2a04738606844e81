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

// func addAVX2(o, a, b *float32, n int)
// o = a + b.
TEXT ·addAVX2(SB), NOSPLIT, $0-32
	MOVQ o+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), R8
	MOVQ n+24(FP), CX
	XORQ AX, AX

add_loop:
	CMPQ AX, CX
	JGE  add_done
	VMOVUPS (SI)(AX*4), Y0
	VADDPS  (R8)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     add_loop

add_done:
	VZEROUPPER
	RET

// func dsAVX2(dp, p *float32, n int, dot float32)
// dp = p * (dp - dot): attention's dS from dP.
TEXT ·dsAVX2(SB), NOSPLIT, $0-28
	MOVQ dp+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS dot+24(FP), Y15
	XORQ AX, AX

ds_loop:
	CMPQ AX, CX
	JGE  ds_done
	VMOVUPS (DI)(AX*4), Y0
	VSUBPS  Y15, Y0, Y0        // dp - dot
	VMOVUPS (SI)(AX*4), Y1
	VMULPS  Y0, Y1, Y1         // p * (dp - dot)
	VMOVUPS Y1, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     ds_loop

ds_done:
	VZEROUPPER
	RET

// func rmsScaleAVX2(o, x, w *float32, n int, r float32)
// o = (x*r)*w: RMSNorm's output.
TEXT ·rmsScaleAVX2(SB), NOSPLIT, $0-36
	MOVQ o+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), R8
	MOVQ n+24(FP), CX
	VBROADCASTSS r+32(FP), Y15
	XORQ AX, AX

rs_loop:
	CMPQ AX, CX
	JGE  rs_done
	VMOVUPS (SI)(AX*4), Y0
	VMULPS  Y15, Y0, Y0        // x*r
	VMULPS  (R8)(AX*4), Y0, Y0 // (x*r)*w
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     rs_loop

rs_done:
	VZEROUPPER
	RET

// func rmsDxAVX2(dx, dy, x, w *float32, n int, r, c float32)
// dx += (r*w)*dy - x*c: one row of RMSNorm's input gradient.
TEXT ·rmsDxAVX2(SB), NOSPLIT, $0-48
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ x+16(FP), R8
	MOVQ w+24(FP), R9
	MOVQ n+32(FP), CX
	VBROADCASTSS r+40(FP), Y14
	VBROADCASTSS c+44(FP), Y15
	XORQ AX, AX

rdx_loop:
	CMPQ AX, CX
	JGE  rdx_done
	VMOVUPS (R9)(AX*4), Y0
	VMULPS  Y0, Y14, Y0        // r*w
	VMULPS  (SI)(AX*4), Y0, Y0 // (r*w)*dy
	VMOVUPS (R8)(AX*4), Y1
	VMULPS  Y15, Y1, Y1        // x*c
	VSUBPS  Y1, Y0, Y0         // (r*w)*dy - x*c
	VMOVUPS (DI)(AX*4), Y2
	VADDPS  Y0, Y2, Y2         // dx + ...
	VMOVUPS Y2, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     rdx_loop

rdx_done:
	VZEROUPPER
	RET

// func ropeAVX2(x1, x2, c, s *float32, n int, flip uint32)
// a, b = x1, x2; s' = s with its sign bit XORed with flip;
// x1 = a*c - b*s'; x2 = b*c + a*s'.
TEXT ·ropeAVX2(SB), NOSPLIT, $0-44
	MOVQ x1+0(FP), DI
	MOVQ x2+8(FP), SI
	MOVQ c+16(FP), R8
	MOVQ s+24(FP), R9
	MOVQ n+32(FP), CX
	VBROADCASTSS flip+40(FP), Y15
	XORQ AX, AX

rope_loop:
	CMPQ AX, CX
	JGE  rope_done
	VMOVUPS (DI)(AX*4), Y0     // a
	VMOVUPS (SI)(AX*4), Y1     // b
	VMOVUPS (R8)(AX*4), Y2     // c
	VMOVUPS (R9)(AX*4), Y3
	VXORPS  Y15, Y3, Y3        // s'
	VMULPS  Y2, Y0, Y4         // a*c
	VMULPS  Y3, Y1, Y5         // b*s'
	VSUBPS  Y5, Y4, Y4         // a*c - b*s'
	VMULPS  Y2, Y1, Y6         // b*c
	VMULPS  Y3, Y0, Y7         // a*s'
	VADDPS  Y7, Y6, Y6         // b*c + a*s'
	VMOVUPS Y4, (DI)(AX*4)
	VMOVUPS Y6, (SI)(AX*4)
	ADDQ    $8, AX
	JMP     rope_loop

rope_done:
	VZEROUPPER
	RET

// The lane reductions below add into acc[0:8] (see lanes.go): element i
// of the input goes to lane i%8. n is a multiple of 8.

// func sumLanesAVX2(acc, x *float32, n int)
TEXT ·sumLanesAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVUPS (DI), Y0
	XORQ AX, AX

suml_loop:
	CMPQ AX, CX
	JGE  suml_done
	VMOVUPS (SI)(AX*4), Y1
	VADDPS  Y1, Y0, Y0
	ADDQ    $8, AX
	JMP     suml_loop

suml_done:
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET

// func dotLanesAVX2(acc, a, b *float32, n int)
// acc += a*b, the product rounded first.
TEXT ·dotLanesAVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), R8
	MOVQ n+24(FP), CX
	VMOVUPS (DI), Y0
	XORQ AX, AX

dotl_loop:
	CMPQ AX, CX
	JGE  dotl_done
	VMOVUPS (SI)(AX*4), Y1
	VMULPS  (R8)(AX*4), Y1, Y1
	VADDPS  Y1, Y0, Y0
	ADDQ    $8, AX
	JMP     dotl_loop

dotl_done:
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET

// func sumDotShiftLanesAVX2(s, sx, e, v *float32, n int, shift float32)
// s += e; sx += e*(v-shift).
TEXT ·sumDotShiftLanesAVX2(SB), NOSPLIT, $0-44
	MOVQ s+0(FP), DI
	MOVQ sx+8(FP), R10
	MOVQ e+16(FP), SI
	MOVQ v+24(FP), R8
	MOVQ n+32(FP), CX
	VBROADCASTSS shift+40(FP), Y15
	VMOVUPS (DI), Y0
	VMOVUPS (R10), Y1
	XORQ AX, AX

sds_loop:
	CMPQ AX, CX
	JGE  sds_done
	VMOVUPS (SI)(AX*4), Y2     // e
	VADDPS  Y2, Y0, Y0         // s += e
	VMOVUPS (R8)(AX*4), Y3
	VSUBPS  Y15, Y3, Y3        // v - shift
	VMULPS  Y3, Y2, Y3         // e*(v-shift)
	VADDPS  Y3, Y1, Y1
	ADDQ    $8, AX
	JMP     sds_loop

sds_done:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, (R10)
	VZEROUPPER
	RET

// func rmsBwdLanesAVX2(acc, pw, dy, x, w *float32, n int, r float32)
// acc += (dy*w)*x; pw += (dy*x)*r.
TEXT ·rmsBwdLanesAVX2(SB), NOSPLIT, $0-52
	MOVQ acc+0(FP), DI
	MOVQ pw+8(FP), R10
	MOVQ dy+16(FP), SI
	MOVQ x+24(FP), R8
	MOVQ w+32(FP), R9
	MOVQ n+40(FP), CX
	VBROADCASTSS r+48(FP), Y15
	VMOVUPS (DI), Y0
	XORQ AX, AX

rbl_loop:
	CMPQ AX, CX
	JGE  rbl_done
	VMOVUPS (SI)(AX*4), Y1     // dy
	VMOVUPS (R8)(AX*4), Y2     // x
	VMULPS  (R9)(AX*4), Y1, Y3 // dy*w
	VMULPS  Y2, Y3, Y3         // (dy*w)*x
	VADDPS  Y3, Y0, Y0
	VMULPS  Y2, Y1, Y4         // dy*x
	VMULPS  Y15, Y4, Y4        // (dy*x)*r
	VMOVUPS (R10)(AX*4), Y5
	VADDPS  Y4, Y5, Y5         // pw + ...
	VMOVUPS Y5, (R10)(AX*4)
	ADDQ    $8, AX
	JMP     rbl_loop

rbl_done:
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET
