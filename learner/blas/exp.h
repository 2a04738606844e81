// The vectorised exp of exp.c; see exp.go.

int exp_level(void);
void expshifted(double *dst, const float *src, long n, double shift, double scale);
long exp32shift(float *dst, const float *src, long n, float shift, unsigned neg);
