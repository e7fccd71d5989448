// The state of one recovery (LocalLoad, local_load.cc) on one rank, and
// what its steps share: the node copy's mappings, the round's messages and
// the units that reached this rank.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "shardpoint/storage.h"
#include "src/format/manifest.h"
#include "src/io/file_map.h"
#include "src/local/overlay.h"
#include "src/local/placement.h"
#include "src/local/recover_plan.h"
#include "src/local/topology.h"
#include "src/local/units.h"

namespace shardpoint::internal_local {

// Memory for one round, handed out in order and never moved within the
// round (views point into it); grown between rounds, never zero-filled (a
// page is touched only when written).
class RoundBuffer {
 public:
  // Room for n bytes this round.
  void Reset(size_t n) {
    if (n > capacity_) {
      data_.reset(new char[n]);
      capacity_ = n;
    }
    at_ = 0;
  }
  // REQUIRES: the round's Take()s add up to at most Reset's n.
  char* Take(size_t n) {
    char* p = data_.get() + at_;
    at_ += n;
    return p;
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0, at_ = 0;
};

// The state of one recovery on this rank.
struct Recovery {
  Recovery(Comm& c, const Topology& top, Storage* n, Storage* p, std::string d, std::string pd)
      : comm(c), t(top), node(n), persistent(p), dir(std::move(d)), persistent_dir(std::move(pd)) {}
  Comm& comm;
  const Topology& t;
  Storage* node;  // this rank's node storage
  Storage* persistent;
  std::string dir;  // "/iter_..."
  std::string persistent_dir;
  std::string manifest_bytes;
  internal_format::Manifest m;
  UnitTable ut;
  CopyState copies;
  std::vector<std::vector<uint32_t>> needs;  // per rank
  std::vector<std::vector<char>> maps_of;    // per rank, per file: its node copy is mapped
  OverlayFiles overlay;                      // the node's copy, and the object units received
  std::unique_ptr<internal_format::Manifest> persistent_manifest_checked;  // set once compared
  LoadResult result;
  Placer* placer = nullptr;  // set by step 3; used by the own reads' thread too
  // Object units received (small): the pipeline reads them after the
  // exchange through `overlay`.
  std::deque<std::string> kept_objects;
  // The node's copy of each file, mapped where the node storage maps (null:
  // read through ReadAt); made before the reads start, read-only after.
  std::vector<std::unique_ptr<internal_io::MappedFile>> maps;
  Arrived arrived;  // units that reached this rank in the current round
  // The round's messages, per receiver: a header per unit, then the unit's
  // bytes where it is sent: views of a mapping, of `reads` or of `headers`.
  std::vector<std::vector<std::string_view>> out;
  RoundBuffer headers;  // the round's headers
  RoundBuffer reads;    // the units read (not mapped) in the round
};

// The files of one directory, opened on first use (one thread at a time).
struct FileCache {
  Storage* storage;
  std::string dir;
  std::map<uint32_t, std::unique_ptr<ReadableFile>> open;
};

// Notes a verified unit that reached this rank: a tensor unit is placed
// with the round's others; an object unit is kept for the pipeline.
void Arrive(Recovery& x, uint32_t u, const char* bytes);

// Reads unit u into dst (u.nbytes) and checks it against its checksum.
Status ReadUnitInto(FileCache& files, const internal_format::Manifest& m, const Unit& u, char* dst);

// The same into *bytes, reused from unit to unit (fresh memory costs a
// page fault per page).
Status ReadUnit(FileCache& files, const internal_format::Manifest& m, const Unit& u,
                std::string* bytes);

}  // namespace shardpoint::internal_local
