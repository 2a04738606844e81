// Package promptsource holds the prompt sources a run's data.sources lists
// (Config, one entry; List, all of them): a registry of Kinds, file and
// demo, each of which fills and checks its entries and says what a run
// drawing from them defaults to (Defaults: the batch size, the
// collaborators, the task evaluated, the prompt length of the memory
// plan).
//
// It builds no Beam graph, so that the run configuration (runconfig) reads
// it without linking Beam. How a step draws its prompts from the sources
// is the rollout's: transforms/prompts' Draw, with the draws that
// transforms/trajectories registers for the two kinds.
package promptsource
