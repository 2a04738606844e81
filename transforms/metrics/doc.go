// Package metrics computes benchmark scores from per-sample verdicts the way
// reasoning papers report them: Avg@k (the mean accuracy over the k samples
// of each problem, averaged over problems), the unbiased Pass@k estimator of
// Chen et al. 2021 ("Evaluating Large Language Models Trained on Code"),
// and maj@k (majority vote over the extracted final answers), each with a
// standard error over problems.
//
// Standard errors treat the problems of a benchmark as the sample: the
// per-problem score s_i (its accuracy, Pass@k estimate or majority-vote
// outcome) has sample standard deviation sd, and the error of the mean over
// N problems is sd/sqrt(N). This is the error that matters when a benchmark
// is a draw from a population of problems; the extra variance of sampling
// only k responses per problem is included in the s_i.
package metrics
