#include <stdint.h>

// The fixed-order product of rowdots.c; see rowdots.go.

enum { ROWDOTS_NONE = 0, ROWDOTS_AVX2 = 1, ROWDOTS_AVX512 = 2 };

int rowdots_level(void);
void rowdots(int level, int n, int m, int k, const float *x, int ldx, const float *w, int ldw, float *c,
	     int ldc);
// rowdots_bf16 is rowdots with the rows of w in bfloat16, widened exactly
// as they are loaded.
void rowdots_bf16(int level, int n, int m, int k, const float *x, int ldx, const uint16_t *w, int ldw, float *c,
		  int ldc);
