// Building a State from parts: opaque objects in the field's vocabulary and
// the composition of several owners' states (model chunks, optimizer
// sub-state-dicts) without key collisions.
//
// Objects: per-module opaque bytes (TransformerEngine `_extra_state`), per-rank
// RNG states as a grid of objects, and string settings. A sharded object must
// carry every rank coordinate that distinguishes its bytes (TP rank included):
// two ranks providing the same (key, index) are replicas and one is stored.
// Composition: identical inner keys of two owners are either prefixed with
// the owner's name or rejected with an error naming both owners.
//
// Pure functions on values; not thread-safe for one State.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardpoint/state.h"

namespace shardpoint {

// Opaque bytes of one module (e.g. "decoder.layers.0.mlp.linear_fc1._extra_state"),
// replicated: every rank holding it provides the same bytes.
Object ExtraStateObject(std::string key, std::string bytes);
// Opaque bytes that differ per coordinate of a grid of ranks, e.g. per TP rank
// {tp_rank} of {tp_size}, or per (pp, tp) rank.
Object ShardedObject(std::string key, std::string bytes, Shape index, Shape grid);
// This rank's RNG state: index {rank} of grid {world}.
Object RngStateObject(std::string key, std::string bytes, int rank, int world);
// A string setting (e.g. the optimizer's param_state_sharding_type) stored
// once; on load any rank may request it, whether or not it wrote it.
Object SettingObject(std::string key, std::string value);

// True for "_extra_state" and keys ending in "._extra_state".
bool IsExtraStateKey(std::string_view key);
// Removes the objects and tensors (whole LocalTensors any of whose segments
// match) of `state` for which drop(key) holds; returns how many were removed.
// Use before a load that should skip `_extra_state` (with allow_unexpected_keys).
size_t DropKeys(State* state, const std::function<bool(std::string_view)>& drop);

// Prefixes every tensor and object key of `state` with `prefix`.
void AddKeyPrefix(State* state, std::string_view prefix);

// Merges the states of several named owners into one. With prefix_owners,
// every key becomes "<owner>.<key>". Without, a key (tensor or object) held
// by two owners is InvalidArgument naming the key and both owners. The common
// blob and metadata come from the first owner that has them.
Result<State> MergeStates(std::vector<std::pair<std::string, State>> owners, bool prefix_owners);

}  // namespace shardpoint
