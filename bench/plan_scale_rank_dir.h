// What one loading rank of plan_scale_sampled reads, written to a directory
// (--rank-dir) so that plan_scale_rank can time that rank's load plan in a
// process of its own: a loading rank's heap holds its model, not the 4.5 GB
// of the bench's whole modelled manifest.
//
//   DIR/index            the encoded manifest index
//   DIR/rank_<r>.shards  per shard the rank reads: u32 number, u64 size, bytes
//   DIR/rank_<r>.plan    "<bytes> <pieces>" of its load plan from the whole manifest
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "bench/plan_scale_model.h"

namespace plan_scale {

using RankShards = std::vector<std::pair<uint32_t, std::string>>;

inline std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Die("cannot open " + path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

inline void WriteWhole(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) Die("cannot write " + path);
}

inline std::string RankFile(const std::string& dir, int rank, const char* ext) {
  return dir + "/rank_" + std::to_string(rank) + ext;
}

inline void WriteRank(const std::string& dir, int rank, const RankShards& have, uint64_t plan_bytes,
                      size_t plan_pieces) {
  std::string out;
  for (const auto& [s, b] : have) {
    const uint64_t n = b.size();
    out.append(reinterpret_cast<const char*>(&s), 4);
    out.append(reinterpret_cast<const char*>(&n), 8);
    out += b;
  }
  WriteWhole(RankFile(dir, rank, ".shards"), out);
  WriteWhole(RankFile(dir, rank, ".plan"),
             std::to_string(plan_bytes) + " " + std::to_string(plan_pieces) + "\n");
}

inline RankShards ReadRankShards(const std::string& dir, int rank) {
  const std::string all = ReadWhole(RankFile(dir, rank, ".shards"));
  RankShards out;
  for (size_t at = 0; at < all.size();) {
    uint32_t s;
    uint64_t n;
    if (all.size() - at < 12) Die("truncated rank file");
    std::memcpy(&s, all.data() + at, 4);
    std::memcpy(&n, all.data() + at + 4, 8);
    at += 12;
    if (n > all.size() - at) Die("truncated rank file");
    out.emplace_back(s, all.substr(at, n));
    at += n;
  }
  return out;
}

}  // namespace plan_scale
