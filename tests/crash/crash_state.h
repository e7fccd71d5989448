// The state the crash trials save: a deterministic function of (iteration,
// world size, rank), so any process can rebuild what a checkpoint of a given
// iteration must hold, bit for bit, at any world size.
//
//   "w"    F32  [64 * kb / 4 rows... ]  row-sharded across the ranks
//   "b"    BF16 [1000]                  replicated on every rank
//   "rng"  object, one shard per rank (grid {world})
//   common "iteration <it>", metadata {"iteration": <it>}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/state.h"

namespace shardpoint::crash {

inline constexpr int64_t kCols = 256;  // of "w"
inline constexpr int64_t kBias = 1000;

// Rows of "w" for a state of about `kb` KiB in total; a multiple of 12 so
// that 1, 2, 3 and 4 ranks split it evenly.
inline int64_t Rows(int64_t kb) {
  int64_t rows = kb * 1024 / (kCols * 4);
  return rows < 12 ? 12 : rows / 12 * 12;
}

// Byte i of tensor `key` at iteration `it`: a mixing hash, so a chunk of
// another iteration, another offset or another tensor never matches.
inline uint8_t ByteAt(int64_t it, uint64_t key_salt, uint64_t i) {
  uint64_t x = (static_cast<uint64_t>(it) * 0x9E3779B97F4A7C15ull) ^ (key_salt << 40) ^ i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<uint8_t>(x);
}

inline std::string RngObject(int64_t it, int rank) {
  std::string s(24, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(ByteAt(it, 100 + rank, i));
  return s;
}

// Buffers plus the State pointing into them. `rank`/`world` pick this rank's
// rows of "w" and its "rng" shard; a loader at world 1 with all_objects asks
// for every shard of a checkpoint saved by `saved_world` ranks.
struct CrashState {
  std::vector<uint8_t> w, b;
  State state;
};

inline void Build(CrashState* cs, int64_t kb, int rank, int world, int objects_grid = 0) {
  const int64_t rows = Rows(kb), mine = rows / world;
  cs->w.assign(static_cast<size_t>(mine * kCols * 4), 0);
  cs->b.assign(static_cast<size_t>(kBias * 2), 0);
  State& s = cs->state;
  s = State{};
  LocalTensor w;
  w.dtype = DType::kF32;
  w.data = cs->w.data();
  w.shape = {mine, kCols};
  w.segments = {{"w", {rows, kCols}, Box{{rank * mine, 0}, {mine, kCols}}, {0, 0}}};
  s.tensors.push_back(w);
  LocalTensor b;
  b.dtype = DType::kBF16;
  b.data = cs->b.data();
  b.shape = {kBias};
  b.segments = {{"b", {kBias}, Box{{0}, {kBias}}, {0}}};
  s.tensors.push_back(b);
  if (objects_grid == 0) {
    s.objects.push_back({"rng", "", {rank}, {world}});
  } else {
    for (int r = 0; r < objects_grid; ++r) s.objects.push_back({"rng", "", {r}, {objects_grid}});
  }
}

// Fills the buffers, objects, common and metadata with iteration `it`.
inline void Fill(CrashState* cs, int64_t it, int64_t kb, int rank, int world) {
  const uint64_t first = static_cast<uint64_t>(rank * (Rows(kb) / world) * kCols * 4);
  for (size_t i = 0; i < cs->w.size(); ++i) cs->w[i] = ByteAt(it, 1, first + i);
  for (size_t i = 0; i < cs->b.size(); ++i) cs->b[i] = ByteAt(it, 2, i);
  for (Object& o : cs->state.objects) o.bytes = RngObject(it, static_cast<int>(o.index[0]));
  cs->state.common = "iteration " + std::to_string(it);
  cs->state.metadata_json = "{\"iteration\": " + std::to_string(it) + "}";
}

// "" if the loaded state is exactly iteration `it`, else what differs.
inline std::string Mismatch(const CrashState& cs, int64_t it, int64_t kb, int rank, int world) {
  const uint64_t first = static_cast<uint64_t>(rank * (Rows(kb) / world) * kCols * 4);
  for (size_t i = 0; i < cs.w.size(); ++i) {
    if (cs.w[i] != ByteAt(it, 1, first + i)) return "w differs at byte " + std::to_string(i);
  }
  for (size_t i = 0; i < cs.b.size(); ++i) {
    if (cs.b[i] != ByteAt(it, 2, i)) return "b differs at byte " + std::to_string(i);
  }
  for (const Object& o : cs.state.objects) {
    if (o.bytes != RngObject(it, static_cast<int>(o.index[0]))) {
      return "object rng shard " + std::to_string(o.index[0]) + " differs";
    }
  }
  if (cs.state.common != "iteration " + std::to_string(it)) return "common differs";
  if (cs.state.metadata_json != "{\"iteration\": " + std::to_string(it) + "}") {
    return "metadata differs: " + cs.state.metadata_json;
  }
  return "";
}

}  // namespace shardpoint::crash
