// The fixed-order product of rowdots.c; see rowdots.go.

enum { ROWDOTS_NONE = 0, ROWDOTS_AVX2 = 1, ROWDOTS_AVX512 = 2 };

int rowdots_level(void);
void rowdots(int level, int n, int m, int k, const float *x, int ldx, const float *w, int ldw, float *c,
	     int ldc);
