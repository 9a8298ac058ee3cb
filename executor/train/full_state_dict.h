// A consolidated full state dict of the model parameters (issue #5): every unit's fp32 master
// shards all-gathered in its shard group, unpadded and cut into the module tree's parameters
// (Hugging Face names and shapes, model/module_tree.cc), written by rank 0 as one safetensors
// file (https://github.com/huggingface/safetensors, "Format"): an 8-byte little-endian header
// length N, N bytes of JSON {"NAME": {"dtype": "F32", "shape": [...], "data_offsets": [BEGIN,
// END]}, ..., "__metadata__": {...}} padded with spaces to a multiple of 8, then the raw
// little-endian tensor bytes; offsets are relative to the first byte after the header. Tensors
// come in FSDP-unit order, each unit's parameters in module order, so the same parameters give
// byte-identical files on any world size (with expert parallelism the experts follow their
// block's other parameters: the same tensors, in another order). Names and shapes are those of
// transformers' checkpoint of the model's class (model::HfParameter: the MoE blocks' names per
// architecture, GPT-OSS's 3-D experts, DeepSeek-V3's e_score_correction_bias buffer); the
// experts of an expert-parallel run are written per expert as the HF modules they stand for.
#pragma once

#include <string>

namespace shardtune::exec {

class FsdpRuntime;

// Collective over every rank of the runtime's groups: gathers one unit at a time (rank 0 holds
// one full unit in fp32 plus the file being built). Rank 0 writes `path` atomically (temporary
// name, fsync, rename: checkpoint.h WriteFileAtomically). `model_name` goes into the metadata.
// REQUIRES: real shard groups (not Emulated with a world > 1). Throws BackendError.
void ExportFullStateDict(FsdpRuntime& runtime, int rank, const std::string& model_name,
                         const std::string& path);

}  // namespace shardtune::exec
