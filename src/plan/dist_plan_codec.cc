//   reply      u32 'SPR1' | u8 0 | u64 n, n x (u64 chunk, u8 role) | u64 m, m x u8 role
//              u32 'SPR1' | u8 1 | u8 phase, u64 rank, u64 index, str key, u8 code, str message
//   skeleton   u64 t, t x (str key, u8 dtype, ints shape, u64 c, c x box)
//              box = the offset's, then the shape's dims (as many as the
//              tensor's), each a varint
//              u64 o, o x (str key, ints index, ints grid, u64 nbytes)
//   structure  u32 'SPT2' | blob skeleton | u64 k, k x str key |
//              u64 n, n x (ref, varint offset, varint nbytes)
//              ref = u8 is_object, varint key, then ints index (object) or varint chunk
#include "src/plan/dist_plan_codec.h"

#include <algorithm>

#include "src/plan/varint.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::TensorRecord;

namespace shardpoint::internal_plan {
namespace {

constexpr uint32_t kReplyMagic = 0x31525053;      // "SPR1"
constexpr uint32_t kStructureMagic = 0x32545053;  // "SPT2" (SPT1 listed replicas)

Status ReadSkeleton(std::string_view bytes, int rank, Manifest* m) {
  ByteReader in(bytes, "plan skeleton of rank " + std::to_string(rank));
  uint64_t nt;
  SP_RETURN_IF_ERROR(in.Count(&nt, 14));
  m->tensors.resize(nt);
  for (TensorRecord& t : m->tensors) {
    uint8_t dtype;
    uint64_t nc;
    SP_RETURN_IF_ERROR(in.Str(&t.key));
    SP_RETURN_IF_ERROR(in.U8(&dtype));
    if (!IsValidDType(dtype)) return DataLossError("plan skeleton: bad dtype for '" + t.key + "'");
    t.dtype = static_cast<DType>(dtype);
    SP_RETURN_IF_ERROR(in.Ints(&t.shape));
    SP_RETURN_IF_ERROR(in.Count(&nc, std::max<size_t>(1, 2 * t.shape.size())));
    t.chunks.resize(nc);
    for (ChunkRecord& c : t.chunks) {
      c.box.offset.resize(t.shape.size());
      c.box.shape.resize(t.shape.size());
      for (int64_t& x : c.box.offset) SP_RETURN_IF_ERROR(GetVarint(in, &x));
      for (int64_t& x : c.box.shape) SP_RETURN_IF_ERROR(GetVarint(in, &x));
      SP_RETURN_IF_ERROR(ValidateBoxInShape(c.box, t.shape).WithContext("plan skeleton"));
      c.nbytes = static_cast<uint64_t>(c.box.num_elements()) * DTypeSize(t.dtype);
    }
  }
  uint64_t no;
  SP_RETURN_IF_ERROR(in.Count(&no, 14));
  m->objects.resize(no);
  for (ObjectRecord& o : m->objects) {
    SP_RETURN_IF_ERROR(in.Str(&o.key));
    SP_RETURN_IF_ERROR(in.Ints(&o.index));
    SP_RETURN_IF_ERROR(in.Ints(&o.grid));
    SP_RETURN_IF_ERROR(in.U64(&o.nbytes));
  }
  return in.ExpectEnd();
}

Status ReadRef(ByteReader& in, size_t nkeys, PieceRef* p) {
  uint8_t is_object;
  SP_RETURN_IF_ERROR(in.U8(&is_object));
  p->is_object = is_object != 0;
  uint64_t key;
  SP_RETURN_IF_ERROR(GetVarint(in, &key));
  if (key >= nkeys) return DataLossError("plan structure: key index out of range");
  p->key = static_cast<uint32_t>(key);
  return p->is_object ? in.Ints(&p->index) : GetVarint(in, &p->chunk);
}

}  // namespace

std::string EncodeRoleReply(const ReplyRoles& roles) {
  ByteWriter w;
  w.U32(kReplyMagic);
  w.U8(0);
  w.U64(roles.regions.size());
  for (const auto& [chunk, role] : roles.regions) w.U64(chunk), w.U8(role);
  w.U64(roles.objects.size());
  for (uint8_t role : roles.objects) w.U8(role);
  return std::move(w.str());
}

std::string EncodeErrorReply(const std::vector<PlanError>& errors) {
  ByteWriter w;
  w.U32(kReplyMagic);
  w.U8(1);
  w.U64(errors.size());
  for (const PlanError& e : errors) {
    w.U8(e.phase);
    w.U64(e.rank);
    w.U64(e.index);
    w.Str(e.key);
    w.U8(static_cast<uint8_t>(e.status.code()));
    w.Str(e.status.message());
  }
  return std::move(w.str());
}

bool IsErrorReply(std::string_view bytes) { return bytes.size() > 4 && bytes[4] == 1; }

Result<std::vector<PlanError>> DecodeReply(std::string_view bytes, int owner, ReplyRoles* roles) {
  ByteReader in(bytes, "plan reply from rank " + std::to_string(owner));
  uint32_t magic;
  uint8_t kind;
  SP_RETURN_IF_ERROR(in.U32(&magic));
  SP_RETURN_IF_ERROR(in.U8(&kind));
  if (magic != kReplyMagic || kind > 1) {
    return DataLossError("plan reply from rank " + std::to_string(owner) + ": bad magic");
  }
  if (kind == 1) {
    uint64_t count;
    SP_RETURN_IF_ERROR(in.Count(&count, 26));
    if (count == 0) return DataLossError("plan reply: an error reply without an error");
    std::vector<PlanError> errors(count);
    for (PlanError& e : errors) {
      uint8_t code;
      std::string message;
      SP_RETURN_IF_ERROR(in.U8(&e.phase));
      SP_RETURN_IF_ERROR(in.U64(&e.rank));
      SP_RETURN_IF_ERROR(in.U64(&e.index));
      SP_RETURN_IF_ERROR(in.Str(&e.key));
      SP_RETURN_IF_ERROR(in.U8(&code));
      SP_RETURN_IF_ERROR(in.Str(&message));
      if (code == 0) return DataLossError("plan reply: an error without a code");
      e.status = Status(static_cast<StatusCode>(code), std::move(message));
    }
    SP_RETURN_IF_ERROR(in.ExpectEnd());
    return errors;
  }
  uint64_t n, m;
  SP_RETURN_IF_ERROR(in.Count(&n, 9));
  roles->regions.resize(n);
  for (auto& [chunk, role] : roles->regions) {
    SP_RETURN_IF_ERROR(in.U64(&chunk));
    SP_RETURN_IF_ERROR(in.U8(&role));
  }
  SP_RETURN_IF_ERROR(in.Count(&m, 1));
  roles->objects.resize(m);
  for (uint8_t& role : roles->objects) SP_RETURN_IF_ERROR(in.U8(&role));
  SP_RETURN_IF_ERROR(in.ExpectEnd());
  return std::vector<PlanError>();
}

std::string EncodeSkeleton(const Manifest& m) {
  ByteWriter w;
  w.U64(m.tensors.size());
  for (const TensorRecord& t : m.tensors) {
    w.Str(t.key);
    w.U8(static_cast<uint8_t>(t.dtype));
    w.Ints(t.shape);
    w.U64(t.chunks.size());
    for (const ChunkRecord& c : t.chunks) {
      for (int64_t x : c.box.offset) PutVarint(w, static_cast<uint64_t>(x));
      for (int64_t x : c.box.shape) PutVarint(w, static_cast<uint64_t>(x));
    }
  }
  w.U64(m.objects.size());
  for (const ObjectRecord& o : m.objects) {
    w.Str(o.key);
    w.Ints(o.index);
    w.Ints(o.grid);
    w.U64(o.nbytes);
  }
  return std::move(w.str());
}

Result<Manifest> DecodeSkeleton(std::string_view bytes, int rank) {
  Manifest m;
  SP_RETURN_IF_ERROR(ReadSkeleton(bytes, rank, &m));
  return m;
}

uint32_t StructureWriter::Intern(const std::string& key) {
  auto [it, fresh] = ids_.try_emplace(key, static_cast<uint32_t>(ids_.size()));
  if (fresh) keys_.Str(key);
  return it->second;
}

void StructureWriter::Ref(ByteWriter& w, bool is_object, const std::string& key, uint64_t chunk,
                          const Shape* index) {
  w.U8(is_object ? 1 : 0);
  PutVarint(w, Intern(key));
  if (is_object) {
    w.Ints(*index);
  } else {
    PutVarint(w, chunk);
  }
}

void StructureWriter::Item(bool is_object, const std::string& key, uint64_t chunk,
                           const Shape* index, uint64_t offset, uint64_t nbytes) {
  Ref(items_, is_object, key, chunk, index);
  PutVarint(items_, offset);
  PutVarint(items_, nbytes);
  ++nitems_;
}

std::string StructureWriter::Finish() {
  ByteWriter w;
  w.U32(kStructureMagic);
  w.Blob(skeleton_);
  w.U64(ids_.size());
  w.Raw(keys_.str().data(), keys_.str().size());
  w.U64(nitems_);
  w.Raw(items_.str().data(), items_.str().size());
  return std::move(w.str());
}

Result<Structure> DecodeStructure(std::string_view bytes, int rank) {
  ByteReader in(bytes, "plan structure of rank " + std::to_string(rank));
  uint32_t magic;
  SP_RETURN_IF_ERROR(in.U32(&magic));
  if (magic != kStructureMagic) {
    return DataLossError("plan structure of rank " + std::to_string(rank) + ": bad magic");
  }
  Structure s;
  std::string skeleton;
  SP_RETURN_IF_ERROR(in.Blob(&skeleton));
  SP_RETURN_IF_ERROR(ReadSkeleton(skeleton, rank, &s.skeleton));
  uint64_t nkeys, nitems;
  SP_RETURN_IF_ERROR(in.Count(&nkeys, 4));
  s.keys.resize(nkeys);
  for (std::string& k : s.keys) SP_RETURN_IF_ERROR(in.Str(&k));
  SP_RETURN_IF_ERROR(in.Count(&nitems, 5));
  s.items.resize(nitems);
  for (PieceRef& p : s.items) {
    SP_RETURN_IF_ERROR(ReadRef(in, nkeys, &p));
    SP_RETURN_IF_ERROR(GetVarint(in, &p.offset));
    SP_RETURN_IF_ERROR(GetVarint(in, &p.nbytes));
  }
  SP_RETURN_IF_ERROR(in.ExpectEnd());
  return s;
}

}  // namespace shardpoint::internal_plan
