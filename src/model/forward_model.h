// ForwardModel: the seam between callers that schedule tokens (Session, the tools, later the
// engine's runner) and a backend that computes a forward pass: the CPU Model (model/model.h) or
// the CUDA model (runner/cuda_model.h). Both own a paged KV cache of n_kv_blocks blocks of
// kv_block_size slots, addressed through the block tables in each ForwardBatch (kvcache/ hands
// the block ids out). One thread calls a ForwardModel at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/arch.h"

namespace duet {

// A sequence's block table, as the forward pass reads it.
struct SeqKvView {
  const int32_t* blocks = nullptr;
  uint32_t n_blocks = 0;
};

// tokens[i] sits at positions[i] of sequence seqs[seq_ids[i]]. A token attends to positions
// [0, positions[i]] of its sequence (a window for sliding-window layers): earlier positions
// must already be in the cache or earlier in this batch. Tokens of one sequence are contiguous
// and in increasing position order. Logits come back for output_rows, in that order.
struct ForwardBatch {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  std::span<const int32_t> seq_ids;
  std::span<const SeqKvView> seqs;
  std::span<const int32_t> output_rows;
};

class ForwardModel {
 public:
  virtual ~ForwardModel() = default;

  virtual const HParams& hparams() const = 0;
  virtual uint32_t kv_block_size() const = 0;
  virtual uint32_t n_kv_blocks() const = 0;
  virtual uint32_t max_context() const = 0;
  // "cpu" or "cuda:0 (NVIDIA H200, native kernels)": for logs and JSON output.
  virtual std::string device_name() const = 0;

  // logits: output_rows.size() x vocab_size floats (host memory). Bad ids, positions or block
  // ids in the batch return kInvalidArgument before anything is computed.
  virtual Status forward(const ForwardBatch& batch, float* logits) = 0;

  // Greedy decoding without the logits: tokens[i] = the argmax of output row i's logits (the
  // first maximum on ties, kernels/cpu/sampling.h argmax), output_rows.size() ids (host memory).
  // Same validation as forward(). The CUDA model takes the argmax on the device and reads back
  // only the ids; this default runs forward() into host memory and takes it there.
  virtual Status forward_greedy(const ForwardBatch& batch, int32_t* tokens);

  // Time per op when the backend was asked to measure it (CUDA: DUET_CUDA_PROFILE=1), else "".
  virtual std::string profile_report() const { return ""; }
  // While paused, forwards are left out of profile_report() (benchmarks pause it over warm-up
  // and untimed work). No effect on a backend that does not profile.
  virtual void pause_profile(bool paused) { (void)paused; }

 private:
  std::vector<float> greedy_logits_;  // forward_greedy's scratch (no allocation per step)
};

// The paged cache's shape, as both backends size it: kv_block_size tokens per block, max_context
// tokens per sequence (0: min(context_length, 4096)), room for max_seqs full sequences unless
// n_kv_blocks is given. Fills the zeros in; fails on out-of-range values.
struct CacheGeometry {
  uint32_t kv_block_size = 16;
  uint32_t max_context = 0;
  uint32_t max_seqs = 1;
  uint32_t n_kv_blocks = 0;
};
Status resolve_cache_geometry(const HParams& hp, CacheGeometry* g);

// Gemma 3's sliding-window layers (every layer but each sliding_window_pattern-th), for weights
// that did not come from the binders (which set it); one flag per layer.
std::vector<uint8_t> default_sliding_layers(const HParams& hp);

// Checks a batch against the cache geometry and vocabulary (shared by the backends).
Status validate_forward_batch(const ForwardBatch& b, uint32_t vocab_size, uint32_t kv_block_size, uint32_t n_kv_blocks);

}  // namespace duet
