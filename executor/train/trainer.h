// The training loop of one rank: data, micro-batches, backward with (or without) gradient
// sync, clipping, the sharded optimizer, the LR schedule, sharded checkpoints and resume.
// Internal to the executor (run.cc drives it).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "executor/train/checkpoint.h"
#include "executor/comm/collective_log.h"
#include "executor/train/data.h"
#include "executor/fsdp/fsdp_runtime.h"
#include "executor/fsdp/optimizer.h"
#include "executor/recorder.h"
#include "executor/train/run.h"
#include "executor/train/watchdog.h"

namespace shardtune::exec {

struct TrainerContext {
  RunOptions options;
  ProcessGroups groups;
  int rank = 0;        // global rank (real processes)
  int world_size = 1;  // real processes
  int dp_rank = 0;     // data-parallel rank: which sequences this rank reads
  int dp_world = 1;    // data-parallel ranks (emulated world when emulating), world / cp
  int cp_rank = 0;     // index in the cp group: which slice S / cp of the sequences it holds
  Recorder* recorder = nullptr;
  RunCallbacks callbacks;
  int cuda_device = -1;  // >= 0: parameters, batches and optimizer state on this GPU
  Watchdog* watchdog = nullptr;  // not owned; hears a Progress() per micro-batch (may be null)
};

class Trainer {
 public:
  explicit Trainer(TrainerContext context);
  ~Trainer();

  // Loads the newest complete checkpoint of out_dir (all ranks agree through rank 0) and
  // returns its step, or 0 when there is none. Corrupted ones are reported and skipped.
  int64_t Resume();
  // Runs optimizer step `step` (1-based) over the global batch; returns its log.
  StepLog Step(int64_t step);
  // Writes the sharded checkpoint of the state after step `step` (collective over all ranks).
  void SaveCheckpoint(int64_t step);

  FsdpRuntime& runtime() { return *runtime_; }
  int64_t global_batch() const;  // sequences per step
  int64_t seq_len() const { return seq_len_; }
  const std::string& data_description() const { return data_.description(); }

 private:
  void Message(const std::string& text) const;
  // tokens and labels [B, S / cp]: this rank's slice of the cp group's sequences.
  at::Tensor Batch(int64_t step, int micro, at::Tensor* labels) const;
  // One micro-batch of a step: inputs and labels, the packed row's sequence lengths (empty:
  // unpacked), and the factor its mean loss enters the step's loss with.
  struct MicroBatch {
    at::Tensor tokens, labels;
    int64_t first_sequence = 0;  // its first sequence (Images() makes a VL model's images of it)
    std::vector<int64_t> packing;
    double scale = 1.0;
  };
  // The step's micro-batches on this rank and the tokens of the whole global batch (labels
  // counted once each). Classic (every sequence S long, unpacked): grad_accum micro-batches of
  // Batch(), scale 1 / grad_accum. Uniform lengths or packed: the loss is the mean over the
  // global batch's tokens, so a micro-batch of n counted labels has scale dp x n / tokens (FSDP
  // averages the ranks' gradients).
  std::vector<MicroBatch> MicroBatches(int64_t step, int64_t* global_tokens) const;
  // A VL model's images of the B sequences first .. first + B - 1 (plan images and
  // image_tokens, issue #43): each sequence holds `images` images of image_tokens / images
  // tokens each, right after its first token; an image of t tokens is a grid of gh x gw merge
  // groups (gh the largest divisor of t not above sqrt(t)), its pixel values N(0, 1) drawn from
  // a generator seeded by (seed, sequence, image), so they depend on neither the world size nor
  // the accumulation. Empty for a text model or a text-only plan.
  ImageBatch Images(int64_t first, int64_t B) const;
  int64_t SequenceLength(int64_t index) const;  // tokens of global sequence `index`
  // Sequence `index`'s first `len` + 1 tokens: inputs [0, len), labels [1, len].
  std::vector<int64_t> SequenceTokens(int64_t index, int64_t len) const;
  bool Classic() const;  // no --lengths, unpacked
  // What a checkpoint file holds, as sources streamed from the tensors (checkpoint.h).
  std::vector<BlobSource> StateSources(int64_t step) const;
  void LoadState(const std::string& file, int64_t step);
  std::string CheckpointRoot() const;
  // Rank 0: removes step_N.tmp / step_N.old folders a save that did not finish left behind.
  void RemovePartialCheckpoints() const;
  // Rank 0, after step `kept_step` was committed: --keep-checkpoints K removes all but the K
  // newest complete checkpoints (never the one just written).
  void PruneCheckpoints(int64_t kept_step) const;

  TrainerContext ctx_;
  int64_t seq_len_ = 0;   // the row: S, or a packed plan's token budget T
  int64_t longest_ = 0;   // the longest sequence: S, or packed_seq_len
  TokenSource data_;
  std::unique_ptr<FsdpRuntime> runtime_;
  std::unique_ptr<ShardedOptimizer> optimizer_;  // over the trainable flat parameters only
  std::vector<int> opt_index_;  // per flat parameter: its optimizer index, -1 when frozen
  LrOptions lr_;
};

}  // namespace shardtune::exec
