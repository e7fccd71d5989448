#include "src/checkpoint/replica_owners.h"

#include <cstdio>
#include <map>
#include <tuple>

#include "src/base/bytes.h"
#include "src/format/manifest.h"
#include "src/plan/varint.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_format::kDataDir;
using shardpoint::internal_plan::Contribution;
using shardpoint::internal_plan::GetVarint;
using shardpoint::internal_plan::KeyOwner;
using shardpoint::internal_plan::LocalPlan;
using shardpoint::internal_plan::ObjectOwner;
using shardpoint::internal_plan::PutVarint;
using shardpoint::internal_plan::WriteItem;

namespace shardpoint::internal_checkpoint {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void Append(std::string* out, ByteWriter& w) { out->append(w.str()); }

void PutDims(ByteWriter& w, const Shape& v) {
  PutVarint(w, v.size());
  for (int64_t x : v) PutVarint(w, static_cast<uint64_t>(x));
}

Status GetDims(ByteReader& in, Shape* v) {
  uint64_t n;
  SP_RETURN_IF_ERROR(GetVarint(in, &n));
  if (n > internal_base::kMaxRank) return DataLossError("a shape of rank " + std::to_string(n));
  v->resize(n);
  for (int64_t& x : *v) SP_RETURN_IF_ERROR(GetVarint(in, &x));
  return OkStatus();
}

// A piece of a key: a tensor's chunk or an object's index.
struct Where {
  bool is_object = false;
  std::string key;
  uint64_t chunk = 0;
  Shape index;
  bool operator<(const Where& o) const {
    return std::tie(is_object, key, chunk, index) < std::tie(o.is_object, o.key, o.chunk, o.index);
  }
};

struct Writer {
  int rank;
  uint64_t sum;
  Box box;
};

Status ReadWhere(ByteReader& in, const std::vector<std::string>& keys, Where* w) {
  uint8_t is_object;
  uint32_t key;
  SP_RETURN_IF_ERROR(in.U8(&is_object));
  SP_RETURN_IF_ERROR(in.U32(&key));
  if (key >= keys.size()) return DataLossError("key " + std::to_string(key) + " out of range");
  w->is_object = is_object != 0;
  w->key = keys[key];
  return w->is_object ? GetDims(in, &w->index) : GetVarint(in, &w->chunk);
}

struct Held {
  Where where;
  uint32_t position;
  uint64_t sum;
};

// One sender's message: its writers into *writers, its replicas into *held.
Status Decode(std::string_view bytes, int sender, std::map<Where, Writer>* writers,
              std::vector<Held>* held) {
  ByteReader in(bytes, "replica checksums from rank " + std::to_string(sender));
  uint64_t nkeys, n;
  SP_RETURN_IF_ERROR(in.Count(&nkeys, 8));
  std::vector<std::string> keys(nkeys);
  for (std::string& k : keys) SP_RETURN_IF_ERROR(in.Str(&k));
  SP_RETURN_IF_ERROR(in.Count(&n, 14));
  for (uint64_t i = 0; i < n; ++i) {
    Where w;
    Writer wr{sender, 0, Box()};
    SP_RETURN_IF_ERROR(ReadWhere(in, keys, &w));
    SP_RETURN_IF_ERROR(in.U64(&wr.sum));
    if (!w.is_object) {
      SP_RETURN_IF_ERROR(GetDims(in, &wr.box.offset));
      SP_RETURN_IF_ERROR(GetDims(in, &wr.box.shape));
    }
    writers->emplace(std::move(w), std::move(wr));
  }
  SP_RETURN_IF_ERROR(in.Count(&n, 18));
  for (uint64_t i = 0; i < n; ++i) {
    Held h;
    SP_RETURN_IF_ERROR(ReadWhere(in, keys, &h.where));
    SP_RETURN_IF_ERROR(in.U32(&h.position));
    SP_RETURN_IF_ERROR(in.U64(&h.sum));
    held->push_back(std::move(h));
  }
  return in.ExpectEnd();
}

std::string FileOf(int writer) {
  return std::string(kDataDir) + "/" + std::to_string(writer) + ".safetensors";
}

// The message CompareReplicas gave on rank 0, word for word.
Status Mismatch(const Where& w, int holder, uint64_t mine, const Writer& wr) {
  if (w.is_object) {
    return InvalidArgumentError("object '" + w.key + "' index " + ShapeToString(w.index) +
                                ": rank " + std::to_string(holder) +
                                " holds different bytes than the rank that wrote it to '" +
                                FileOf(wr.rank) + "' (checksum " + Hex(mine) + " vs " +
                                Hex(wr.sum) + "); replicas must be identical");
  }
  return InvalidArgumentError("tensor '" + w.key + "' box " + wr.box.ToString() + ": rank " +
                              std::to_string(holder) +
                              " holds different data than the rank that wrote it to '" +
                              FileOf(wr.rank) + "' (checksum " + Hex(mine) + " vs " + Hex(wr.sum) +
                              "); ranks that declare the same box must hold identical replicas");
}

void KeepFirst(ReplicaMismatch m, std::optional<ReplicaMismatch>* first) {
  if (!*first || std::tie(m.rank, m.position) < std::tie((*first)->rank, (*first)->position)) {
    *first = std::move(m);
  }
}

}  // namespace

uint32_t ReplicaSumsWriter::Intern(const std::string& key) {
  auto [it, fresh] = ids_.try_emplace(key, static_cast<uint32_t>(ids_.size()));
  if (fresh) {
    ByteWriter w;
    w.Str(key);
    Append(&keys_, w);
  }
  return it->second;
}

void ReplicaSumsWriter::Written(const std::string& key, uint64_t chunk, const Box& box,
                                uint64_t sum) {
  ByteWriter w;
  w.U8(0), w.U32(Intern(key));
  PutVarint(w, chunk);
  w.U64(sum);
  PutDims(w, box.offset), PutDims(w, box.shape);
  Append(&written_, w);
  ++nwritten_;
}

void ReplicaSumsWriter::WrittenObject(const std::string& key, const Shape& index, uint64_t sum) {
  ByteWriter w;
  w.U8(1), w.U32(Intern(key));
  PutDims(w, index);
  w.U64(sum);
  Append(&written_, w);
  ++nwritten_;
}

void ReplicaSumsWriter::Replica(const std::string& key, uint64_t chunk, uint32_t position,
                                uint64_t sum) {
  ByteWriter w;
  w.U8(0), w.U32(Intern(key));
  PutVarint(w, chunk);
  w.U32(position), w.U64(sum);
  Append(&replicas_, w);
  ++nreplicas_;
}

void ReplicaSumsWriter::ReplicaObject(const std::string& key, const Shape& index, uint32_t position,
                                      uint64_t sum) {
  ByteWriter w;
  w.U8(1), w.U32(Intern(key));
  PutDims(w, index);
  w.U32(position), w.U64(sum);
  Append(&replicas_, w);
  ++nreplicas_;
}

std::string ReplicaSumsWriter::Finish() const {
  ByteWriter w;
  w.U64(ids_.size());
  w.Raw(keys_.data(), keys_.size());
  w.U64(nwritten_);
  w.Raw(written_.data(), written_.size());
  w.U64(nreplicas_);
  w.Raw(replicas_.data(), replicas_.size());
  return std::move(w.str());
}

std::vector<std::string> EncodeReplicaSums(const Contribution& mine, const LocalPlan& lp,
                                           const std::vector<uint64_t>& item_sums,
                                           const std::vector<uint64_t>& replica_sums, int n) {
  std::map<int, ReplicaSumsWriter> to;
  for (uint32_t i : lp.shared) {
    const WriteItem& item = lp.file.items[i];
    if (item.is_object) {
      const auto& o = mine.objects[item.source];
      to[ObjectOwner(o.key, o.index, n)].WrittenObject(o.key, o.index, item_sums[i]);
    } else {
      const auto& r = mine.regions[item.source];
      to[KeyOwner(r.key, n)].Written(r.key, static_cast<uint64_t>(item.chunk), r.box, item_sums[i]);
    }
  }
  for (size_t i = 0; i < lp.file.replicas.size(); ++i) {
    const WriteItem& item = lp.file.replicas[i];
    const auto position = static_cast<uint32_t>(i);
    if (item.is_object) {
      const auto& o = mine.objects[item.source];
      to[ObjectOwner(o.key, o.index, n)].ReplicaObject(o.key, o.index, position, replica_sums[i]);
    } else {
      const auto& r = mine.regions[item.source];
      to[KeyOwner(r.key, n)].Replica(r.key, static_cast<uint64_t>(item.chunk), position,
                                     replica_sums[i]);
    }
  }
  std::vector<std::string> out(n);
  for (const auto& [o, w] : to) out[o] = w.Finish();
  return out;
}

std::optional<ReplicaMismatch> CompareOwnedReplicas(
    const std::vector<std::pair<int, std::string_view>>& received) {
  std::map<Where, Writer> writers;
  std::vector<std::pair<int, Held>> held;
  std::optional<ReplicaMismatch> first;
  for (const auto& [s, bytes] : received) {
    if (bytes.empty()) continue;
    std::vector<Held> h;
    Status st = Decode(bytes, s, &writers, &h);
    if (!st.ok()) {
      KeepFirst({static_cast<uint64_t>(s), 0, st}, &first);
      continue;
    }
    for (Held& x : h) held.emplace_back(s, std::move(x));
  }
  for (const auto& [s, h] : held) {
    auto it = writers.find(h.where);
    if (it == writers.end()) {
      KeepFirst({static_cast<uint64_t>(s), h.position,
                 InternalError("save: rank " + std::to_string(s) + " holds a replica of " +
                               (h.where.is_object ? "object '" : "tensor '") + h.where.key +
                               "' whose writer sent its owner no checksum")},
                &first);
      continue;
    }
    if (it->second.sum == h.sum) continue;
    KeepFirst({static_cast<uint64_t>(s), h.position, Mismatch(h.where, s, h.sum, it->second)},
              &first);
  }
  return first;
}

std::string EncodeReport(const std::optional<ReplicaMismatch>& m) {
  if (!m) return "";
  ByteWriter w;
  w.U64(m->rank), w.U64(m->position);
  w.U8(static_cast<uint8_t>(m->status.code()));
  w.Str(m->status.message());
  return std::move(w.str());
}

Status FirstMismatch(const std::vector<std::string>& reports) {
  std::optional<ReplicaMismatch> first;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (reports[r].empty()) continue;
    ByteReader in(reports[r], "replica report of rank " + std::to_string(r));
    ReplicaMismatch m;
    uint8_t code;
    std::string text;
    SP_RETURN_IF_ERROR(in.U64(&m.rank));
    SP_RETURN_IF_ERROR(in.U64(&m.position));
    SP_RETURN_IF_ERROR(in.U8(&code));
    SP_RETURN_IF_ERROR(in.Str(&text));
    SP_RETURN_IF_ERROR(in.ExpectEnd());
    if (code == 0 || code > static_cast<uint8_t>(StatusCode::kDeadlineExceeded)) {
      return DataLossError("replica report of rank " + std::to_string(r) + ": status code " +
                           std::to_string(code));
    }
    m.status = Status(static_cast<StatusCode>(code), std::move(text));
    KeepFirst(std::move(m), &first);
  }
  return first ? first->status : OkStatus();
}

}  // namespace shardpoint::internal_checkpoint
