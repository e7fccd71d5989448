#include "src/objstore/s3_upload.h"

#include <algorithm>
#include <cstring>

namespace shardpoint::internal_objstore {

S3Upload::S3Upload(S3Client* client, std::string bucket, std::string key)
    : client_(client),
      bucket_(std::move(bucket)),
      key_(std::move(key)),
      part_size_(client->options().part_size) {}

S3Upload::~S3Upload() {
  if (!done_) Abort().IgnoreError();
}

int S3Upload::buffers_allocated() const {
  std::lock_guard<std::mutex> lock(free_mu_);
  return allocated_;
}

std::unique_ptr<char[]> S3Upload::TakeBuffer() {
  {
    std::lock_guard<std::mutex> lock(free_mu_);
    if (!free_.empty()) {
      std::unique_ptr<char[]> b = std::move(free_.back());
      free_.pop_back();
      return b;
    }
    ++allocated_;
  }
  return std::unique_ptr<char[]>(new char[part_size_]);  // not zeroed: every byte is written
}

void S3Upload::GiveBuffer(std::unique_ptr<char[]> buffer) {
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lock(free_mu_);
  if (static_cast<int>(free_.size()) < client_->options().parts_in_flight + 2) {
    free_.push_back(std::move(buffer));
  }
}

Status S3Upload::WaitOldest() {
  Result<std::string> etag = in_flight_[first_in_flight_].get();
  const size_t index = first_in_flight_++;
  if (!etag.ok()) {
    if (error_.ok()) error_ = etag.status();
    return error_;
  }
  etags_[index] = *etag;
  return OkStatus();
}

// Sends the staged part from a worker thread, which computes its
// Content-MD5 (UploadPart) and then hands the buffer back.
Status S3Upload::StartPart() {
  if (upload_id_.empty()) {
    SP_ASSIGN_OR_RETURN(upload_id_, client_->CreateMultipartUpload(bucket_, key_));
  }
  const size_t live = in_flight_.size() - first_in_flight_;
  if (static_cast<int>(live) >= client_->options().parts_in_flight) {
    SP_RETURN_IF_ERROR(WaitOldest());
  }
  const int number = static_cast<int>(in_flight_.size()) + 1;
  if (number > 10000) {
    return InvalidArgumentError("upload s3://" + bucket_ + "/" + key_ +
                                ": more than 10000 parts; raise the part size");
  }
  etags_.emplace_back();
  in_flight_.push_back(std::async(
      std::launch::async,
      [this, number, n = staged_size_, data = std::move(staged_)]() mutable -> Result<std::string> {
        Result<std::string> etag =
            client_->UploadPart(bucket_, key_, upload_id_, number, std::string_view(data.get(), n));
        GiveBuffer(std::move(data));
        return etag;
      }));
  staged_size_ = 0;
  return OkStatus();
}

Status S3Upload::Append(const void* data, size_t n) {
  SP_RETURN_IF_ERROR(error_);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (staged_ == nullptr) staged_ = TakeBuffer();
    const size_t k = std::min(n, part_size_ - staged_size_);
    std::memcpy(staged_.get() + staged_size_, p, k);
    staged_size_ += k;
    p += k;
    n -= k;
    size_ += k;
    // A full part is sent only once more bytes follow, so the last part is
    // never empty and a one-part object is a plain PUT.
    if (staged_size_ == part_size_ && n > 0) {
      Status s = StartPart();
      if (!s.ok()) {
        if (error_.ok()) error_ = s;
        return error_;
      }
    }
  }
  return OkStatus();
}

Status S3Upload::Finish(bool if_none_match) {
  SP_RETURN_IF_ERROR(error_);
  if (upload_id_.empty()) {
    done_ = true;
    Status s = client_->PutObject(bucket_, key_, std::string_view(staged_.get(), staged_size_),
                                  if_none_match);
    GiveBuffer(std::move(staged_));
    return s;
  }
  if (if_none_match) {
    return InvalidArgumentError("upload s3://" + bucket_ + "/" + key_ +
                                ": a conditional create must fit in one part");
  }
  if (staged_size_ > 0) SP_RETURN_IF_ERROR(StartPart());
  while (first_in_flight_ < in_flight_.size()) {
    Status s = WaitOldest();
    if (!s.ok()) {
      while (first_in_flight_ < in_flight_.size()) WaitOldest().IgnoreError();
      return s;
    }
  }
  SP_RETURN_IF_ERROR(client_->CompleteMultipartUpload(bucket_, key_, upload_id_, etags_));
  done_ = true;
  return OkStatus();
}

Status S3Upload::Abort() {
  while (first_in_flight_ < in_flight_.size()) WaitOldest().IgnoreError();
  done_ = true;
  if (upload_id_.empty()) return OkStatus();
  return client_->AbortMultipartUpload(bucket_, key_, upload_id_);
}

}  // namespace shardpoint::internal_objstore
