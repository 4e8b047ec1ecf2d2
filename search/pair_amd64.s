//go:build !purego

#include "textflag.h"

// func indexPairAVX2(s []byte, n, d int, c0, m0, c1, m1 byte) int
TEXT ·indexPairAVX2(SB), NOSPLIT, $0-56
	MOVQ s_base+0(FP), SI
	MOVQ n+24(FP), CX
	MOVQ d+32(FP), R8
	ADDQ SI, R8 // the second byte of candidate i is at R8+i
	VPBROADCASTB c0+40(FP), Y0
	VPBROADCASTB m0+41(FP), Y1
	VPBROADCASTB c1+42(FP), Y2
	VPBROADCASTB m1+43(FP), Y3
	LEAQ -32(CX), DX // the last block starts at n-32
	XORQ DI, DI

loop:
	VMOVDQU (SI)(DI*1), Y4
	VPOR    Y1, Y4, Y4
	VPCMPEQB Y0, Y4, Y4
	VMOVDQU (R8)(DI*1), Y5
	VPOR    Y3, Y5, Y5
	VPCMPEQB Y2, Y5, Y5
	VPAND   Y4, Y5, Y5
	VPMOVMSKB Y5, AX
	TESTL   AX, AX
	JNZ     found
	CMPQ    DI, DX
	JAE     none
	ADDQ    $32, DI
	CMPQ    DI, DX
	JBE     loop
	MOVQ    DX, DI // the last, partly compared block
	JMP     loop

found:
	BSFL   AX, AX
	ADDQ   DI, AX
	MOVQ   AX, ret+48(FP)
	VZEROUPPER
	RET

none:
	MOVQ $-1, ret+48(FP)
	VZEROUPPER
	RET
