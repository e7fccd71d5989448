// A Hugging Face model as the source of a sharded load.
//
// Every mapped shardpoint tensor is a set of pieces, each a box of the global
// tensor held by a contiguous byte range of an HF file, so a sharded load
// reads only the bytes of its own shards, through the same load pipeline as
// Load (docs/architecture.md). DescribeHf says what a model provides, HfShard
// (hf_keys.h) cuts a rank's shard of it, LoadFromHf (collective) fills every
// rank's state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "shardpoint/hf_keys.h"
#include "shardpoint/hf_mapping.h"
#include "shardpoint/state.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint {

// Resources (resources.h): storage (the rest is not used).
struct HfOptions : Resources {
  // Variables for the rules (over config.json and the mapping's defaults).
  std::map<std::string, int64_t> variables;
};
Result<std::vector<HfKeyInfo>> DescribeHf(const std::string& hf_dir, const HfMapping& mapping,
                                          const HfOptions& options = {});

// Load's options with the defaults of an HF load: every rank reads only the
// bytes of its own boxes (cooperative off, no gap bridging). HF files carry
// no checksums, so verify_checksums has nothing to check.
inline LoadOptions HfDefaultLoadOptions() {
  LoadOptions o;
  o.cooperative = false;
  o.read_gap_bytes = 0;
  return o;
}

struct HfLoadOptions {
  // Resources (storage, pool, io_threads, log), allow_* checks, read slices,
  // cooperative reads: as Load.
  LoadOptions load = HfDefaultLoadOptions();
  // Mapping variables ({vocab_size}, ...) beyond those of config.json.
  std::map<std::string, int64_t> variables;
};
// Collective: fills every rank's state from the HF model at `hf_dir`. Rank 0
// reads the headers and broadcasts them (one collective); every rank maps
// them, then the load runs exactly as Load's (the same pipeline): requested
// keys checked (missing, unexpected, dtype, shape), each rank reads the byte
// runs of its own boxes (or, with load.cooperative, each needed byte is read
// once in all and sent to the ranks that need it).
Result<LoadResult> LoadFromHf(State& state, const std::string& hf_dir, const HfMapping& mapping,
                              Comm& comm, const HfLoadOptions& options = {});

}  // namespace shardpoint
