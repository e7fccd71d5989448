// The fields the manifest (manifest.cc) and the manifest index
// (manifest_index.cc) share, read and checked once for both: counts bounded
// by the bytes left, a tensor's key, dtype and shape, an object's key, index
// and grid, the common blob and metadata at the end. Errors are DataLoss
// prefixed "<kind> '<name>': ", naming the byte where the input went wrong.
// What a field is called ("tensor 'k' chunk 3") may be passed as a function
// returning it, built only on an error: a manifest has millions of fields.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "shardpoint/box.h"
#include "shardpoint/dtype.h"
#include "shardpoint/status.h"
#include "src/base/bytes.h"
#include "src/base/checked.h"
#include "src/base/limits.h"

namespace shardpoint::internal_format {

// A field's name: a string, or a function returning one (called on error).
template <typename W>
std::string FieldName(const W& w) {
  if constexpr (std::is_invocable_v<W>) {
    return w();
  } else {
    return std::string(w);
  }
}

// Whether `index` (of `grid`'s rank) lies inside `grid`: 0 <= index < grid
// in every dimension.
inline bool IndexInGrid(const Shape& grid, const Shape& index) {
  for (size_t d = 0; d < grid.size(); ++d) {
    if (index[d] < 0 || index[d] >= grid[d]) return false;
  }
  return true;
}

class FieldReader {
 public:
  // `kind` "manifest" or "manifest index"; `body` the bytes before the checksum.
  FieldReader(std::string_view body, const std::string& kind, const std::string& name)
      : r_(body, kind + " '" + name + "'"), prefix_(kind + " '" + name + "': ") {}

  Status Error(const std::string& msg) const { return DataLossError(prefix_ + msg); }
  Status Truncated(const std::string& what) const {
    return Error("truncated or corrupt at byte " + std::to_string(r_.pos()) + " reading " + what);
  }
  // A count of items of at least `min_size` bytes each that must fit the rest.
  template <typename W>
  Status Count(size_t min_size, const W& what, uint64_t* n) {
    const size_t at = r_.pos();
    if (!r_.Int(n).ok()) return Truncated(FieldName(what) + " count");
    if (*n > r_.left() / min_size) {
      return Error(FieldName(what) + " count " + std::to_string(*n) + " at byte " +
                   std::to_string(at) + " does not fit the remaining " + std::to_string(r_.left()) +
                   " bytes");
    }
    return OkStatus();
  }
  // u8 rank (at most kMaxRank), then that many i64 (`what` + `dims_suffix`).
  template <typename W>
  Status RankAndDims(const W& what, const char* dims_suffix, Shape* dims) {
    uint8_t rank;
    if (!r_.Int(&rank).ok()) return Truncated(FieldName(what) + " rank");
    if (rank > internal_base::kMaxRank) {
      return Error(FieldName(what) + " has rank " + std::to_string(rank) + " > 32");
    }
    if (!r_.Dims(rank, dims).ok()) return Truncated(FieldName(what) + dims_suffix);
    return OkStatus();
  }
  // str key, u8 dtype, u8 rank, rank x i64 shape (non-negative, its byte
  // size not overflowing). `Key`: std::string, or std::string_view for a
  // view into the input (no copy).
  template <typename Key>
  Status TensorHead(Key* key, DType* dtype, Shape* shape) {
    Status read;
    if constexpr (std::is_same_v<Key, std::string_view>) {
      read = r_.StrView(key);
    } else {
      read = r_.Str(key);
    }
    if (!read.ok()) return Truncated("a tensor key");
    auto what = [&] { return "tensor '" + std::string(*key) + "'"; };
    uint8_t d;
    if (!r_.Int(&d).ok()) return Truncated(what() + " dtype");
    if (!IsValidDType(d)) return Error(what() + " has invalid dtype " + std::to_string(d));
    *dtype = static_cast<DType>(d);
    SP_RETURN_IF_ERROR(RankAndDims(what, " shape", shape));
    Result<int64_t> numel = CheckedNumElements(*shape);
    if (!numel.ok() || !internal_base::CheckedMul<uint64_t>(*numel, DTypeSize(*dtype))) {
      return Error(what() + " has invalid shape " + ShapeToString(*shape) +
                   " (negative or overflowing)");
    }
    return OkStatus();
  }
  // str key, u8 rank, index, u8 rank, grid; the index inside the grid.
  Status ObjectHead(std::string* key, Shape* index, Shape* grid) {
    if (!r_.Str(key).ok()) return Truncated("an object key");
    auto what = [&] { return "object '" + *key + "'"; };
    SP_RETURN_IF_ERROR(RankAndDims([&] { return what() + " index"; }, "", index));
    SP_RETURN_IF_ERROR(RankAndDims([&] { return what() + " grid"; }, "", grid));
    auto where = [&] { return what() + " index " + ShapeToString(*index); };
    if (index->size() != grid->size()) {
      return Error(where() + " has a different rank from its grid " + ShapeToString(*grid));
    }
    if (!IndexInGrid(*grid, *index)) {
      return Error(where() + " lies outside its grid " + ShapeToString(*grid));
    }
    return OkStatus();
  }
  // u8 has_common, blob common, blob metadata, and nothing more.
  Status Tail(bool* has_common, std::string* common, std::string* metadata) {
    uint8_t flag;
    if (!r_.Int(&flag).ok() || !r_.Blob(common).ok()) return Truncated("the common blob");
    if (flag > 1 || (!flag && !common->empty())) {
      return Error("invalid common blob flag " + std::to_string(flag));
    }
    *has_common = flag == 1;
    if (!r_.Blob(metadata).ok()) return Truncated("the metadata");
    if (r_.left() != 0) {
      return Error(std::to_string(r_.left()) + " unexpected bytes at byte " +
                   std::to_string(r_.pos()) + " before the checksum");
    }
    return OkStatus();
  }

 protected:
  internal_base::ByteReader r_;

 private:
  std::string prefix_;
};

}  // namespace shardpoint::internal_format
