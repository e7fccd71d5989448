#include "src/objstore/s3_upload.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace shardpoint::internal_objstore {
namespace {

std::string Range(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Whether [begin, end) meets a range of `ranges` (begin -> end, disjoint).
template <typename Map, typename EndOf>
bool Overlaps(const Map& ranges, uint64_t begin, uint64_t end, EndOf end_of) {
  auto next = ranges.upper_bound(begin);
  if (next != ranges.end() && next->first < end) return true;
  return next != ranges.begin() && end_of(*std::prev(next)) > begin;
}

// Parts staged at once: two, and enough for 32 MiB of writes in flight.
uint64_t WindowParts(size_t part_size) {
  return 2 + ((uint64_t{32} << 20) + part_size - 1) / part_size;
}

}  // namespace

S3Upload::S3Upload(S3Client* client, std::string bucket, std::string key,
                   std::shared_ptr<PartPool> pool)
    : client_(client),
      bucket_(std::move(bucket)),
      key_(std::move(key)),
      part_size_(client->options().part_size),
      window_(WindowParts(part_size_)),
      pool_(pool != nullptr
                ? std::move(pool)
                : std::make_shared<PartPool>(
                      part_size_, static_cast<int>(window_) + client->options().parts_in_flight)) {}

S3Upload::~S3Upload() {
  if (!done_) Abort().IgnoreError();
}

std::string S3Upload::Uri() const { return "s3://" + bucket_ + "/" + key_; }

uint64_t S3Upload::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return end_;
}

int S3Upload::parts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return upload_id_.empty() ? 0 : static_cast<int>(etags_.size());
}

uint64_t S3Upload::spilled_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spilled_bytes_;
}

S3Upload::Part& S3Upload::Staged(uint64_t index) {
  Part& part = staged_[index];
  if (part.buffer == nullptr) part.buffer = pool_->Take();
  return part;
}

// Records [begin, end) of part `index` as written (merged with neighbours).
Status S3Upload::Claim(Part& part, uint64_t index, uint64_t begin, uint64_t end) {
  auto& r = part.ranges;
  if (Overlaps(r, begin, end, [](const auto& kv) { return kv.second; })) {
    const uint64_t at = index * part_size_;
    return InvalidArgumentError("write " + Uri() + " at bytes " + Range(at + begin, at + end) +
                                ": overlaps an earlier write");
  }
  auto next = r.lower_bound(end);
  if (next != r.end() && next->first == end) {
    end = next->second;
    next = r.erase(next);
  }
  if (next != r.begin() && std::prev(next)->second == begin) {
    std::prev(next)->second = end;
  } else {
    r.emplace(begin, end);
  }
  return OkStatus();
}

// Under mu_: where each piece of [offset, offset + n) goes. Pieces in the
// window become `copies` (done outside the lock); others are held.
Status S3Upload::Place(uint64_t offset, const char* data, size_t n, std::vector<Copy>* copies) {
  while (n > 0) {
    const uint64_t index = offset / part_size_;
    const uint64_t begin = offset - index * part_size_;
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, part_size_ - begin));
    if (Sent(index)) {
      return InvalidArgumentError("write " + Uri() + " at bytes " + Range(offset, offset + k) +
                                  ": part " + std::to_string(index + 1) + " was already sent");
    }
    if (index < base_ + window_) {
      Part& part = Staged(index);
      SP_RETURN_IF_ERROR(Claim(part, index, begin, begin + k));
      copies->push_back(Copy{part.buffer.get() + begin, data, k, index});
    } else {
      if (Overlaps(spilled_, offset, offset + k,
                   [](const auto& kv) { return kv.first + kv.second.size(); })) {
        return InvalidArgumentError("write " + Uri() + " at bytes " + Range(offset, offset + k) +
                                    ": overlaps an earlier write");
      }
      spilled_.emplace(offset, std::string(data, k));
      spilled_bytes_ += k;
    }
    offset += k, data += k, n -= k;
  }
  return OkStatus();
}

Status S3Upload::WriteAt(uint64_t offset, const void* data, size_t n) {
  std::vector<Copy> copies;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SP_RETURN_IF_ERROR(error_);
    if (done_) return FailedPreconditionError("write " + Uri() + ": the upload is finished");
    if (n == 0) return OkStatus();
    Status placed = Place(offset, static_cast<const char*>(data), n, &copies);
    if (!placed.ok()) return error_ = placed;  // the object can no longer be whole
    end_ = std::max(end_, offset + n);
  }
  for (const Copy& c : copies) std::memcpy(c.dst, c.src, c.n);
  std::lock_guard<std::mutex> lock(mu_);
  for (const Copy& c : copies) {
    auto it = staged_.find(c.part);
    if (it != staged_.end()) it->second.done += c.n;
  }
  Status s = SendReady();
  if (!s.ok() && error_.ok()) error_ = s;
  return error_;
}

void S3Upload::ExtendTo(uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  size_ = std::max(size_, size);
  Status s = SendReady();
  if (!s.ok() && error_.ok()) error_ = s;
}

// Under mu_: sends every full part once the object is sure to take more
// than one; moves the window past sent parts and places the writes held
// beyond it that it now reaches.
Status S3Upload::SendReady() {
  for (bool again = true; again;) {
    again = false;
    if (std::max(end_, size_) > part_size_) {
      std::vector<uint64_t> full;
      for (const auto& [index, part] : staged_) {
        if (part.done == part_size_) full.push_back(index);
      }
      for (uint64_t index : full) SP_RETURN_IF_ERROR(Send(index, part_size_));
    }
    while (sent_.erase(base_) > 0) ++base_;
    const uint64_t limit = (base_ + window_) * part_size_;
    while (!spilled_.empty() && spilled_.begin()->first < limit) {
      const uint64_t offset = spilled_.begin()->first;
      const std::string held = std::move(spilled_.begin()->second);
      spilled_.erase(spilled_.begin());
      std::vector<Copy> copies;
      SP_RETURN_IF_ERROR(Place(offset, held.data(), held.size(), &copies));
      for (const Copy& c : copies) {
        std::memcpy(c.dst, c.src, c.n);
        staged_[c.part].done += c.n;
      }
      again = true;
    }
  }
  return OkStatus();
}

// Under mu_: sends the first n bytes of part `index` from a worker thread,
// which computes its Content-MD5 (UploadPart) and returns the buffer.
Status S3Upload::Send(uint64_t index, size_t n) {
  if (index >= 10000) {
    return InvalidArgumentError("upload " + Uri() + ": more than 10000 parts; raise the part size");
  }
  if (upload_id_.empty()) {
    SP_ASSIGN_OR_RETURN(upload_id_, client_->CreateMultipartUpload(bucket_, key_));
  }
  while (static_cast<int>(in_flight_.size() - first_in_flight_) >=
         client_->options().parts_in_flight) {
    SP_RETURN_IF_ERROR(WaitOldest());
  }
  if (etags_.size() <= index) etags_.resize(index + 1);
  auto it = staged_.find(index);
  PartPool::Buffer data = std::move(it->second.buffer);
  staged_.erase(it);
  sent_.insert(index);
  const int number = static_cast<int>(index) + 1;
  in_flight_.push_back(InFlight{
      index, std::async(std::launch::async,
                        [this, number, n, data = std::move(data)]() mutable -> Result<std::string> {
                          Result<std::string> etag = client_->UploadPart(
                              bucket_, key_, upload_id_, number, std::string_view(data.get(), n));
                          pool_->Give(std::move(data));
                          return etag;
                        })});
  return OkStatus();
}

Status S3Upload::WaitOldest() {
  InFlight& f = in_flight_[first_in_flight_++];
  Result<std::string> etag = f.etag.get();
  if (!etag.ok()) {
    if (error_.ok()) error_ = etag.status();
    return error_;
  }
  etags_[f.index] = *etag;
  return OkStatus();
}

// Under mu_: bytes of part `index` below n never written become zeros if
// they lie below ExtendTo's size; else an error naming them.
Status S3Upload::FillHoles(uint64_t index, Part& part, size_t n) {
  uint64_t done = 0;
  for (const auto& [b, e] : part.ranges) done += e - b;
  if (done != part.done) {
    return FailedPreconditionError("finish " + Uri() + ": a write is still in progress");
  }
  const uint64_t at = index * part_size_;
  uint64_t pos = 0;
  auto hole = [&](uint64_t to) -> Status {
    if (to <= pos) return OkStatus();
    if (at + to > size_) {
      return InvalidArgumentError("finish " + Uri() + ": bytes from " + std::to_string(at + pos) +
                                  " to " + std::to_string(at + to) + " were never written");
    }
    std::memset(part.buffer.get() + pos, 0, to - pos);
    return OkStatus();
  };
  for (const auto& [b, e] : part.ranges) {
    SP_RETURN_IF_ERROR(hole(b));
    pos = e;
  }
  return hole(n);
}

Status S3Upload::Finish(bool if_none_match) {
  std::lock_guard<std::mutex> lock(mu_);
  SP_RETURN_IF_ERROR(error_);
  if (done_) return FailedPreconditionError("finish " + Uri() + ": the upload is finished");
  Status s = FinishLocked(if_none_match);
  if (!s.ok() && error_.ok()) error_ = s;
  return s;
}

Status S3Upload::FinishLocked(bool if_none_match) {
  const uint64_t size = std::max(end_, size_);
  if (upload_id_.empty() && size <= part_size_) {  // one PUT
    Part& part = Staged(0);
    SP_RETURN_IF_ERROR(FillHoles(0, part, size));
    done_ = true;
    Status s =
        client_->PutObject(bucket_, key_, std::string_view(part.buffer.get(), size), if_none_match);
    pool_->Give(std::move(part.buffer));
    staged_.clear();
    return s;
  }
  if (if_none_match) {
    return InvalidArgumentError("upload " + Uri() + ": a conditional create must fit in one part");
  }
  SP_RETURN_IF_ERROR(SendPartsLocked());
  SP_RETURN_IF_ERROR(client_->CompleteMultipartUpload(bucket_, key_, upload_id_, etags_));
  done_ = true;
  return OkStatus();
}

Status S3Upload::SendParts() {
  std::lock_guard<std::mutex> lock(mu_);
  SP_RETURN_IF_ERROR(error_);
  if (done_) return FailedPreconditionError("send " + Uri() + ": the upload is finished");
  if (upload_id_.empty() && std::max(end_, size_) <= part_size_) return OkStatus();  // one PUT
  Status s = SendPartsLocked();
  if (!s.ok() && error_.ok()) error_ = s;
  return s;
}

// Every part sent (again a no-op once done) and answered; etags_ complete.
Status S3Upload::SendPartsLocked() {
  const uint64_t size = std::max(end_, size_);
  const uint64_t parts = (size + part_size_ - 1) / part_size_;
  for (uint64_t index = base_; index < parts; ++index) {
    SP_RETURN_IF_ERROR(SendReady());  // the window reaches `index`: its held writes are placed
    if (Sent(index)) continue;
    Part& part = Staged(index);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(part_size_, size - index * part_size_));
    SP_RETURN_IF_ERROR(FillHoles(index, part, n));
    SP_RETURN_IF_ERROR(Send(index, n));
  }
  while (first_in_flight_ < in_flight_.size()) SP_RETURN_IF_ERROR(WaitOldest());
  etags_.resize(parts);
  return OkStatus();
}

Status S3Upload::Abort() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ && error_.ok()) return OkStatus();  // finished: nothing to abandon
  while (first_in_flight_ < in_flight_.size()) WaitOldest().IgnoreError();
  for (auto& [index, part] : staged_) pool_->Give(std::move(part.buffer));
  staged_.clear();
  spilled_.clear();
  done_ = true;
  if (upload_id_.empty()) return OkStatus();
  return client_->AbortMultipartUpload(bucket_, key_, upload_id_);
}

}  // namespace shardpoint::internal_objstore
