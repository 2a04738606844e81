//go:build amd64 && !purego

#include "textflag.h"

// Each constant is 8 copies of a float32 (or int32) bit pattern: a YMM
// operand. The values are those exp32 uses, rounded to float32 as Go rounds
// its untyped constants there.

DATA expk_lo<>+0(SB)/4, $0xc2aeac4f
DATA expk_lo<>+4(SB)/4, $0xc2aeac4f
DATA expk_lo<>+8(SB)/4, $0xc2aeac4f
DATA expk_lo<>+12(SB)/4, $0xc2aeac4f
DATA expk_lo<>+16(SB)/4, $0xc2aeac4f
DATA expk_lo<>+20(SB)/4, $0xc2aeac4f
DATA expk_lo<>+24(SB)/4, $0xc2aeac4f
DATA expk_lo<>+28(SB)/4, $0xc2aeac4f
GLOBL expk_lo<>(SB), RODATA|NOPTR, $32

DATA expk_hi<>+0(SB)/4, $0x42b0c0a5
DATA expk_hi<>+4(SB)/4, $0x42b0c0a5
DATA expk_hi<>+8(SB)/4, $0x42b0c0a5
DATA expk_hi<>+12(SB)/4, $0x42b0c0a5
DATA expk_hi<>+16(SB)/4, $0x42b0c0a5
DATA expk_hi<>+20(SB)/4, $0x42b0c0a5
DATA expk_hi<>+24(SB)/4, $0x42b0c0a5
DATA expk_hi<>+28(SB)/4, $0x42b0c0a5
GLOBL expk_hi<>(SB), RODATA|NOPTR, $32

DATA expk_log2e<>+0(SB)/4, $0x3fb8aa3b
DATA expk_log2e<>+4(SB)/4, $0x3fb8aa3b
DATA expk_log2e<>+8(SB)/4, $0x3fb8aa3b
DATA expk_log2e<>+12(SB)/4, $0x3fb8aa3b
DATA expk_log2e<>+16(SB)/4, $0x3fb8aa3b
DATA expk_log2e<>+20(SB)/4, $0x3fb8aa3b
DATA expk_log2e<>+24(SB)/4, $0x3fb8aa3b
DATA expk_log2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL expk_log2e<>(SB), RODATA|NOPTR, $32

DATA expk_magic<>+0(SB)/4, $0x4b400000
DATA expk_magic<>+4(SB)/4, $0x4b400000
DATA expk_magic<>+8(SB)/4, $0x4b400000
DATA expk_magic<>+12(SB)/4, $0x4b400000
DATA expk_magic<>+16(SB)/4, $0x4b400000
DATA expk_magic<>+20(SB)/4, $0x4b400000
DATA expk_magic<>+24(SB)/4, $0x4b400000
DATA expk_magic<>+28(SB)/4, $0x4b400000
GLOBL expk_magic<>(SB), RODATA|NOPTR, $32

DATA expk_ln2hi<>+0(SB)/4, $0x3f317200
DATA expk_ln2hi<>+4(SB)/4, $0x3f317200
DATA expk_ln2hi<>+8(SB)/4, $0x3f317200
DATA expk_ln2hi<>+12(SB)/4, $0x3f317200
DATA expk_ln2hi<>+16(SB)/4, $0x3f317200
DATA expk_ln2hi<>+20(SB)/4, $0x3f317200
DATA expk_ln2hi<>+24(SB)/4, $0x3f317200
DATA expk_ln2hi<>+28(SB)/4, $0x3f317200
GLOBL expk_ln2hi<>(SB), RODATA|NOPTR, $32

DATA expk_ln2lo<>+0(SB)/4, $0x35bfbe8e
DATA expk_ln2lo<>+4(SB)/4, $0x35bfbe8e
DATA expk_ln2lo<>+8(SB)/4, $0x35bfbe8e
DATA expk_ln2lo<>+12(SB)/4, $0x35bfbe8e
DATA expk_ln2lo<>+16(SB)/4, $0x35bfbe8e
DATA expk_ln2lo<>+20(SB)/4, $0x35bfbe8e
DATA expk_ln2lo<>+24(SB)/4, $0x35bfbe8e
DATA expk_ln2lo<>+28(SB)/4, $0x35bfbe8e
GLOBL expk_ln2lo<>(SB), RODATA|NOPTR, $32

DATA expk_one<>+0(SB)/4, $0x3f800000
DATA expk_one<>+4(SB)/4, $0x3f800000
DATA expk_one<>+8(SB)/4, $0x3f800000
DATA expk_one<>+12(SB)/4, $0x3f800000
DATA expk_one<>+16(SB)/4, $0x3f800000
DATA expk_one<>+20(SB)/4, $0x3f800000
DATA expk_one<>+24(SB)/4, $0x3f800000
DATA expk_one<>+28(SB)/4, $0x3f800000
GLOBL expk_one<>(SB), RODATA|NOPTR, $32

DATA expk_c2<>+0(SB)/4, $0x3f000000
DATA expk_c2<>+4(SB)/4, $0x3f000000
DATA expk_c2<>+8(SB)/4, $0x3f000000
DATA expk_c2<>+12(SB)/4, $0x3f000000
DATA expk_c2<>+16(SB)/4, $0x3f000000
DATA expk_c2<>+20(SB)/4, $0x3f000000
DATA expk_c2<>+24(SB)/4, $0x3f000000
DATA expk_c2<>+28(SB)/4, $0x3f000000
GLOBL expk_c2<>(SB), RODATA|NOPTR, $32

DATA expk_c6<>+0(SB)/4, $0x3e2aaaab
DATA expk_c6<>+4(SB)/4, $0x3e2aaaab
DATA expk_c6<>+8(SB)/4, $0x3e2aaaab
DATA expk_c6<>+12(SB)/4, $0x3e2aaaab
DATA expk_c6<>+16(SB)/4, $0x3e2aaaab
DATA expk_c6<>+20(SB)/4, $0x3e2aaaab
DATA expk_c6<>+24(SB)/4, $0x3e2aaaab
DATA expk_c6<>+28(SB)/4, $0x3e2aaaab
GLOBL expk_c6<>(SB), RODATA|NOPTR, $32

DATA expk_c24<>+0(SB)/4, $0x3d2aaaab
DATA expk_c24<>+4(SB)/4, $0x3d2aaaab
DATA expk_c24<>+8(SB)/4, $0x3d2aaaab
DATA expk_c24<>+12(SB)/4, $0x3d2aaaab
DATA expk_c24<>+16(SB)/4, $0x3d2aaaab
DATA expk_c24<>+20(SB)/4, $0x3d2aaaab
DATA expk_c24<>+24(SB)/4, $0x3d2aaaab
DATA expk_c24<>+28(SB)/4, $0x3d2aaaab
GLOBL expk_c24<>(SB), RODATA|NOPTR, $32

DATA expk_c120<>+0(SB)/4, $0x3c088889
DATA expk_c120<>+4(SB)/4, $0x3c088889
DATA expk_c120<>+8(SB)/4, $0x3c088889
DATA expk_c120<>+12(SB)/4, $0x3c088889
DATA expk_c120<>+16(SB)/4, $0x3c088889
DATA expk_c120<>+20(SB)/4, $0x3c088889
DATA expk_c120<>+24(SB)/4, $0x3c088889
DATA expk_c120<>+28(SB)/4, $0x3c088889
GLOBL expk_c120<>(SB), RODATA|NOPTR, $32

DATA expk_c720<>+0(SB)/4, $0x3ab60b61
DATA expk_c720<>+4(SB)/4, $0x3ab60b61
DATA expk_c720<>+8(SB)/4, $0x3ab60b61
DATA expk_c720<>+12(SB)/4, $0x3ab60b61
DATA expk_c720<>+16(SB)/4, $0x3ab60b61
DATA expk_c720<>+20(SB)/4, $0x3ab60b61
DATA expk_c720<>+24(SB)/4, $0x3ab60b61
DATA expk_c720<>+28(SB)/4, $0x3ab60b61
GLOBL expk_c720<>(SB), RODATA|NOPTR, $32

DATA expk_c5040<>+0(SB)/4, $0x39500d01
DATA expk_c5040<>+4(SB)/4, $0x39500d01
DATA expk_c5040<>+8(SB)/4, $0x39500d01
DATA expk_c5040<>+12(SB)/4, $0x39500d01
DATA expk_c5040<>+16(SB)/4, $0x39500d01
DATA expk_c5040<>+20(SB)/4, $0x39500d01
DATA expk_c5040<>+24(SB)/4, $0x39500d01
DATA expk_c5040<>+28(SB)/4, $0x39500d01
GLOBL expk_c5040<>(SB), RODATA|NOPTR, $32

DATA expk_kexp<>+0(SB)/4, $0x4b3fff81
DATA expk_kexp<>+4(SB)/4, $0x4b3fff81
DATA expk_kexp<>+8(SB)/4, $0x4b3fff81
DATA expk_kexp<>+12(SB)/4, $0x4b3fff81
DATA expk_kexp<>+16(SB)/4, $0x4b3fff81
DATA expk_kexp<>+20(SB)/4, $0x4b3fff81
DATA expk_kexp<>+24(SB)/4, $0x4b3fff81
DATA expk_kexp<>+28(SB)/4, $0x4b3fff81
GLOBL expk_kexp<>(SB), RODATA|NOPTR, $32

// expk_tail holds 8 all-ones words then 8 zero words: the 8 words from
// index 8-r are a mask of r leading lanes.
DATA expk_tail<>+0(SB)/4, $0xffffffff
DATA expk_tail<>+4(SB)/4, $0xffffffff
DATA expk_tail<>+8(SB)/4, $0xffffffff
DATA expk_tail<>+12(SB)/4, $0xffffffff
DATA expk_tail<>+16(SB)/4, $0xffffffff
DATA expk_tail<>+20(SB)/4, $0xffffffff
DATA expk_tail<>+24(SB)/4, $0xffffffff
DATA expk_tail<>+28(SB)/4, $0xffffffff
DATA expk_tail<>+32(SB)/4, $0
DATA expk_tail<>+36(SB)/4, $0
DATA expk_tail<>+40(SB)/4, $0
DATA expk_tail<>+44(SB)/4, $0
DATA expk_tail<>+48(SB)/4, $0
DATA expk_tail<>+52(SB)/4, $0
DATA expk_tail<>+56(SB)/4, $0
DATA expk_tail<>+60(SB)/4, $0
GLOBL expk_tail<>(SB), RODATA|NOPTR, $64

// expk_under is exp32Slow's bound below which exp32 is 0: float32(-103.97208).
DATA expk_under<>+0(SB)/4, $0xc2cff1b4
DATA expk_under<>+4(SB)/4, $0xc2cff1b4
DATA expk_under<>+8(SB)/4, $0xc2cff1b4
DATA expk_under<>+12(SB)/4, $0xc2cff1b4
DATA expk_under<>+16(SB)/4, $0xc2cff1b4
DATA expk_under<>+20(SB)/4, $0xc2cff1b4
DATA expk_under<>+24(SB)/4, $0xc2cff1b4
DATA expk_under<>+28(SB)/4, $0xc2cff1b4
GLOBL expk_under<>(SB), RODATA|NOPTR, $32

// EXP32 computes Y4 = exp32(Y0) lane by lane (clobbers Y1-Y3).
#define EXP32 \
	VMULPS expk_log2e<>(SB), Y0, Y1  \ // x*log2e
	VADDPS expk_magic<>(SB), Y1, Y1  \ // f = x*log2e + magic
	VPSUBD expk_kexp<>(SB), Y1, Y2   \ // bits(f) - 0x4B400000 + 127 = n + 127
	VPSLLD $23, Y2, Y2               \ // 2^n
	VSUBPS expk_magic<>(SB), Y1, Y1  \ // fn = f - magic
	VMULPS expk_ln2hi<>(SB), Y1, Y3  \ // fn*ln2hi
	VSUBPS Y3, Y0, Y3                \ // x - fn*ln2hi
	VMULPS expk_ln2lo<>(SB), Y1, Y4  \ // fn*ln2lo
	VSUBPS Y4, Y3, Y3                \ // r
	VMULPS expk_c5040<>(SB), Y3, Y4  \ // Horner, innermost first
	VADDPS expk_c720<>(SB), Y4, Y4   \
	VMULPS Y3, Y4, Y4                \
	VADDPS expk_c120<>(SB), Y4, Y4   \
	VMULPS Y3, Y4, Y4                \
	VADDPS expk_c24<>(SB), Y4, Y4    \
	VMULPS Y3, Y4, Y4                \
	VADDPS expk_c6<>(SB), Y4, Y4     \
	VMULPS Y3, Y4, Y4                \
	VADDPS expk_c2<>(SB), Y4, Y4     \
	VMULPS Y3, Y4, Y4                \
	VADDPS expk_one<>(SB), Y4, Y4    \
	VMULPS Y3, Y4, Y4                \
	VADDPS expk_one<>(SB), Y4, Y4    \ // p
	VMULPS Y2, Y4, Y4                   // p * 2^n

// INRANGE sets Y1 to the lanes of Y0 inside exp32's fast range
// (x >= lo && x <= hi; false for NaN).
#define INRANGE \
	VCMPPS $13, expk_lo<>(SB), Y0, Y1 \ // GE_OS
	VCMPPS $2, expk_hi<>(SB), Y0, Y2  \ // LE_OS
	VANDPS Y1, Y2, Y1

// ZERO sets Y5 to the lanes of Y0 below expk_under, whose exp32 is 0 (false
// for NaN), and adds them to Y1's: EXP32's result there is replaced by 0.
#define ZERO \
	VCMPPS $1, expk_under<>(SB), Y0, Y5 \ // LT_OS
	VORPS  Y5, Y1, Y1

// func expShiftAVX2(dst, src *float32, n int, shift float32, neg uint32) (done int)
//
// dst[i] = exp32(s[i]-shift), where s[i] is src[i] with its sign bit XORed
// with neg, 8 at a time and then the last n%8 under a lane mask, with
// exp32's operations in exp32's order (no fused multiply-add), so every
// result is bit-identical to exp32's. It stops before the first block
// holding a value of s[i]-shift outside exp32's fast range (or NaN) and
// returns how many elements it wrote. Values below exp32Slow's bound for 0
// (-103.97208) are in range: their result is 0, as exp32Slow's.
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS shift+24(FP), Y15
	VBROADCASTSS neg+28(FP), Y14
	XORQ AX, AX

loop:
	LEAQ 8(AX), DX
	CMPQ DX, CX
	JGT  tail
	VMOVUPS (SI)(AX*4), Y0
	VXORPS  Y14, Y0, Y0
	VSUBPS  Y15, Y0, Y0              // x = s - shift
	INRANGE
	ZERO
	VMOVMSKPS Y1, BX
	CMPL      BX, $0xff
	JNE       done
	EXP32
	VANDNPS Y4, Y5, Y4               // 0 below expk_under
	VMOVUPS Y4, (DI)(AX*4)
	MOVQ    DX, AX
	JMP     loop

tail:
	CMPQ AX, CX
	JGE  done
	// Mask of the CX-AX < 8 remaining lanes.
	MOVQ CX, DX
	SUBQ AX, DX
	NEGQ DX
	LEAQ expk_tail<>(SB), R8
	VMOVUPS 32(R8)(DX*4), Y8
	VMASKMOVPS (SI)(AX*4), Y8, Y0
	VXORPS  Y14, Y0, Y0
	VSUBPS  Y15, Y0, Y0
	INRANGE
	ZERO
	VANDPS    Y8, Y1, Y1
	VMOVMSKPS Y1, BX
	VMOVMSKPS Y8, R9
	CMPL      BX, R9
	JNE       done
	EXP32
	VANDNPS Y4, Y5, Y4
	VMASKMOVPS Y4, Y8, (DI)(AX*4)
	MOVQ CX, AX

done:
	VZEROUPPER
	MOVQ AX, done+32(FP)
	RET
