// Mapping variables from a Megatron-LM torch_dist checkpoint's common.pt:
// the training `args` (an argparse.Namespace pickled there) hold the model's
// sizes, so an export needs no --set for them.
#pragma once

#include <string>

#include "src/hf/mapping.h"

namespace shardpoint::internal_hf {

// From the metadata JSON of a DCP index (src/dcp/dcp_dir.cc:
// {"megatron_torch_dist": {"common.pt": {"args": {"__class__":
// "argparse.Namespace", "state": {...}}}}}): every integer attribute of
// `args` under its own name (num_query_groups, padded_vocab_size, ...), and
// the Hugging Face names the shipped mappings use:
//   num_key_value_heads   num_query_groups if group_query_attention is true,
//                         else num_attention_heads (Megatron ignores
//                         num_query_groups without it)
//   num_hidden_layers     num_layers
//   intermediate_size     ffn_hidden_size
//   moe_intermediate_size moe_ffn_hidden_size
//   head_dim              kv_channels
// vocab_size is args.vocab_size when set (the unpadded size; Megatron keeps
// only padded_vocab_size when the tokenizer gave it). Empty when there is no
// such args object; bools, floats and None are not variables.
Vars MegatronArgsVars(const std::string& metadata_json);

}  // namespace shardpoint::internal_hf
