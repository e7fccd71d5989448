// Distributed save planning, step 4 (dist_plan.h): rank 0 assembles the
// global plan from the structures; and every step in one process.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "src/plan/dist_plan.h"
#include "src/plan/dist_plan_codec.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::kDataDir;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::TensorRecord;

namespace shardpoint::internal_plan {
namespace {

// Where each piece of the manifest is, and whether some rank wrote it.
class Records {
 public:
  explicit Records(Manifest* m) : m_(m) {
    for (size_t t = 0; t < m->tensors.size(); ++t) {
      tensors_[m->tensors[t].key] = static_cast<int64_t>(t);
      written_.emplace_back(m->tensors[t].chunks.size(), false);
    }
    for (size_t o = 0; o < m->objects.size(); ++o) {
      objects_[{m->objects[o].key, m->objects[o].index}] = static_cast<int64_t>(o);
    }
    object_written_.assign(m->objects.size(), false);
  }

  // The (record, chunk) of `p` of rank `r`, checked.
  Result<std::pair<int64_t, int64_t>> Find(const PieceRef& p, const std::string& key, int r) const {
    if (p.is_object) {
      auto it = objects_.find({key, p.index});
      if (it == objects_.end()) return Unknown("object '" + key + "'", r);
      return std::make_pair(it->second, int64_t{0});
    }
    auto it = tensors_.find(key);
    if (it == tensors_.end() || p.chunk >= m_->tensors[it->second].chunks.size()) {
      return Unknown("tensor '" + key + "' chunk " + std::to_string(p.chunk), r);
    }
    return std::make_pair(it->second, static_cast<int64_t>(p.chunk));
  }

  // Places an item written by rank r into file f.
  Status Place(const PieceRef& p, const std::string& key, int r, uint32_t f, WriteItem* item) {
    SP_ASSIGN_OR_RETURN(auto rc, Find(p, key, r));
    auto [record, chunk] = rc;
    auto w = p.is_object ? object_written_[record] : written_[record][chunk];
    const uint64_t nbytes =
        p.is_object ? m_->objects[record].nbytes : m_->tensors[record].chunks[chunk].nbytes;
    if (w || nbytes != p.nbytes) return Unknown("a second or resized copy of '" + key + "'", r);
    w = true;
    if (p.is_object) {
      m_->objects[record].file = f, m_->objects[record].offset = p.offset;
    } else {
      ChunkRecord& c = m_->tensors[record].chunks[chunk];
      c.file = f, c.offset = p.offset;
    }
    *item = WriteItem{p.is_object, 0, record, chunk, p.offset, p.nbytes};
    return OkStatus();
  }

  // Internal unless every chunk and object has a writer.
  Status CheckComplete() const {
    for (size_t t = 0; t < written_.size(); ++t) {
      for (size_t c = 0; c < written_[t].size(); ++c) {
        if (!written_[t][c]) {
          return InternalError("save plan: no rank writes tensor '" + m_->tensors[t].key +
                               "' chunk " + std::to_string(c));
        }
      }
    }
    for (size_t o = 0; o < object_written_.size(); ++o) {
      if (!object_written_[o]) {
        return InternalError("save plan: no rank writes object '" + m_->objects[o].key + "'");
      }
    }
    return OkStatus();
  }

 private:
  static Status Unknown(const std::string& what, int r) {
    return InternalError("save plan: rank " + std::to_string(r) + " describes " + what +
                         ", which no owner planned");
  }
  Manifest* m_;
  std::unordered_map<std::string, int64_t> tensors_;
  std::map<std::pair<std::string, Shape>, int64_t> objects_;
  std::vector<std::vector<bool>> written_;
  std::vector<bool> object_written_;
};

// The owners' skeletons, merged into one sorted manifest.
Status MergeSkeletons(std::vector<Structure>& st, Manifest* m) {
  for (Structure& s : st) {
    for (TensorRecord& t : s.skeleton.tensors) m->tensors.push_back(std::move(t));
    for (ObjectRecord& o : s.skeleton.objects) m->objects.push_back(std::move(o));
    s.skeleton = Manifest();
  }
  std::sort(m->tensors.begin(), m->tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  for (size_t i = 1; i < m->tensors.size(); ++i) {
    if (m->tensors[i].key == m->tensors[i - 1].key) {
      return InternalError("save plan: two owners planned tensor '" + m->tensors[i].key + "'");
    }
  }
  std::sort(m->objects.begin(), m->objects.end(), [](const ObjectRecord& a, const ObjectRecord& b) {
    return std::tie(a.key, a.index) < std::tie(b.key, b.index);
  });
  return OkStatus();
}

}  // namespace

Result<OwnedPlan> AssembleOwned(const std::vector<std::pair<int, std::string_view>>& structures) {
  std::vector<Structure> st(structures.size());
  for (size_t i = 0; i < structures.size(); ++i) {
    SP_ASSIGN_OR_RETURN(st[i], DecodeStructure(structures[i].second, structures[i].first));
  }
  OwnedPlan plan;
  SP_RETURN_IF_ERROR(MergeSkeletons(st, &plan.manifest));
  Records records(&plan.manifest);
  for (size_t i = 0; i < st.size(); ++i) {
    if (st[i].items.empty()) continue;
    const int rank = structures[i].first;
    const auto f = static_cast<uint32_t>(plan.manifest.files.size());
    plan.manifest.files.push_back(std::string(kDataDir) + "/" + std::to_string(rank) +
                                  ".safetensors");
    std::vector<WriteItem>& items =
        plan.writers.emplace_back(rank, std::vector<WriteItem>()).second;
    items.reserve(st[i].items.size());
    for (const PieceRef& p : st[i].items) {
      SP_RETURN_IF_ERROR(records.Place(p, st[i].keys[p.key], rank, f, &items.emplace_back()));
      plan.total_bytes += p.nbytes;
    }
  }
  SP_RETURN_IF_ERROR(records.CheckComplete());
  return plan;
}

Result<SavePlan> AssemblePlan(const std::vector<std::string>& structures) {
  std::vector<std::pair<int, std::string_view>> all;
  for (size_t r = 0; r < structures.size(); ++r)
    all.emplace_back(static_cast<int>(r), structures[r]);
  SP_ASSIGN_OR_RETURN(OwnedPlan owned, AssembleOwned(all));
  SavePlan plan;
  plan.manifest = std::move(owned.manifest);
  plan.total_bytes = owned.total_bytes;
  plan.ranks.resize(structures.size());
  for (size_t f = 0; f < owned.writers.size(); ++f) {
    RankFile& rf = plan.ranks[owned.writers[f].first];
    rf.file = static_cast<int32_t>(f);
    rf.items = std::move(owned.writers[f].second);
  }
  return plan;
}

Result<SavePlan> PlanSaveDistributed(const std::vector<Contribution>& ranks, bool list_replicas,
                                     std::vector<LocalPlan>* local) {
  const int n = static_cast<int>(ranks.size());
  std::vector<std::vector<std::pair<int, std::string>>> inbox(n);
  for (int s = 0; s < n; ++s) {
    std::vector<std::string> shares = EncodeShares(ranks[s], n);
    for (int o = 0; o < n; ++o) {
      if (!shares[o].empty()) inbox[o].emplace_back(s, std::move(shares[o]));
    }
  }
  std::vector<std::vector<std::pair<int, std::string>>> replies(n);
  std::vector<std::string> skeletons(n), errors;
  for (int o = 0; o < n; ++o) {
    Replies received(inbox[o].begin(), inbox[o].end());
    SP_ASSIGN_OR_RETURN(OwnerOutcome out, PlanOwnedKeys(received));
    inbox[o].clear();
    if (!out.error_reply.empty()) errors.push_back(std::move(out.error_reply));
    for (auto& [s, bytes] : out.replies) replies[s].emplace_back(o, std::move(bytes));
    skeletons[o] = std::move(out.skeleton);
  }
  if (std::vector<uint64_t> unnamed = UnnamedInReplies(errors); !unnamed.empty()) {
    std::vector<std::string> held;
    for (const Contribution& c : ranks) held.push_back(NamesHeld(c, unnamed));
    SP_RETURN_IF_ERROR(NameErrorReplies(held, &errors));
  }
  std::vector<std::string> structures(n);
  if (local) local->resize(n);
  for (int r = 0; r < n; ++r) {
    Replies mine(replies[r].begin(), replies[r].end());
    for (const std::string& e : errors) mine.emplace_back(0, e);
    SP_ASSIGN_OR_RETURN(LocalPlan lp, PlanLocal(ranks[r], mine, n, skeletons[r], r, list_replicas));
    structures[r] = lp.structure;
    if (local) (*local)[r] = std::move(lp);
  }
  return AssemblePlan(structures);
}

}  // namespace shardpoint::internal_plan
