// Setting up the model a run asks for (model_setup.cpp): detected from --weights or built from
// --model / --chain, its widths, its weight layout, its configuration and its input.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "app/cli.h"
#include "modules/layered_model.h"
#include "modules/linear_chain.h"

namespace fusedlinear {

// The model `spec` describes for this run: seeded-random parameters, or those of settings.weights
// (read once, strictness per settings), on the run's device and in its dtype, the weight laid out
// as nn.Linear lays it out. Prints the loader's notices to stderr, once. The parameters are drawn
// from a generator of its own, seeded with settings.seed (PyTorch's global one is not touched);
// `rest_of_stream`, if given, receives that generator where the draws left it, for
// build_input.
std::shared_ptr<LayeredModelImpl> build_model(const ModelSpec& spec, const Settings& settings,
                                              at::Generator* rest_of_stream = nullptr);
// The model's input and output widths: its Linears' in --weights (checked as build_model checks
// them), else --in-features and --out-features.
std::pair<int64_t, int64_t> model_in_out(const ModelSpec& spec, const Settings& settings);
// build_model's one LinearChain, for the commands that time a model of one Linear (bench); a
// UsageError for a layered model.
std::shared_ptr<LinearChainImpl> build_linear_model(const ModelSpec& spec,
                                                    const Settings& settings);
// For the fused path on a GPU: times the bias-free GEMM x @ W^T with the weight as it is and
// re-laid (output-major <-> input-major, LinearEpilogueModel::weight_in), in
// turns, 10 calls each after 3 warm-up, and keeps the faster layout. Returns a line saying
// which and the two median times. Where the model runs the skinny kernel for x, which reads W
// output-major, and on the CPU, it changes nothing and says so. Call it after configure_fused.
std::string choose_weight_layout(LinearChainImpl& model, const torch::Tensor& x);
// The same for each Linear of a model, each timed on an input of its width.
std::string choose_weight_layout(LayeredModelImpl& model, const torch::Tensor& x);
// The run's input: settings.input when given (checked against in_features), otherwise
// torch.rand(batch, in_features) drawn from `stream`, the generator build_model drew the
// parameters from, as `torch.manual_seed(seed); model = Model(...); x = torch.rand(batch,
// in_features)` does in Python. (A fresh seed would draw x from the same numbers as the
// weight's first rows, which makes x @ W^T's diagonal ~15 instead of ~0.3.) On the run's
// device and dtype.
torch::Tensor build_input(const Settings& settings, int64_t in_features, at::Generator stream);
// The model settings.weights holds, never guessed: the chain the file carries (its metadata,
// weights/fx_chain.py), else the one registered model whose keys the file's are and whose chain
// parameters name it (swish_chain's add_value; with --no-strict, whose keys it holds). A file of
// a Linear's keys alone fits any chain: a UsageError says to give --model or --chain; one that
// several models fit, to give --model; a LoadError lists the keys when none does.
ModelSpec detect_model(const Settings& settings);
// Throws a UsageError when settings.weights carries a chain other than `model`'s (canonically,
// and after the same Linear): --model NAME contradicting the file.
void check_carried_chain(const ModelSpec& model, const Settings& settings);
// The model of --chain SPEC: its Linear the file's (the one the file's metadata names, else its
// one 2-D "<path>.weight"), or "linear" for seeded-random parameters; each parameter the spec
// names must be in the file (a UsageError lists the keys there), and a chain the file carries
// must be the same (a UsageError otherwise). Throws ChainSpecError for a malformed spec.
ModelSpec chain_model(const std::string& spec, const Settings& settings);
// Sets `precision` and the GEMM `kernel` on the model (and the batch below which bf16x3 with
// cuBLAS runs ieee, from settings).
void configure_fused(LinearChainImpl& model, Precision precision, GemmKernel kernel,
                     const Settings& settings);
void configure_fused(LayeredModelImpl& model, Precision precision, GemmKernel kernel,
                     const Settings& settings);
// What the fused forward runs for input x: "bf16x3, cuBLAS", "ieee, skinny (bf16x3 from 5
// rows)" when the model runs ieee for bf16x3, and so on.
std::string gemm_description(LinearChainImpl& model, const torch::Tensor& x);
// Whether a path's allclose verdict counts toward the exit code: always for the float32-grade
// precisions (ieee, bf16x3) and when the user set --atol/--rtol; tf32 and bf16 are outside the
// default 1e-4 by design and are only reported.
bool verdict_counts(Precision precision, const Settings& settings);

}  // namespace fusedlinear
