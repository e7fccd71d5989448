#include "src/objstore/s3_upload.h"

#include <algorithm>

namespace shardpoint::internal_objstore {

S3Upload::S3Upload(S3Client* client, std::string bucket, std::string key)
    : client_(client), bucket_(std::move(bucket)), key_(std::move(key)) {}

S3Upload::~S3Upload() {
  if (!done_) Abort().IgnoreError();
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
      std::launch::async, [this, number, data = std::move(staged_)]() -> Result<std::string> {
        return client_->UploadPart(bucket_, key_, upload_id_, number, data);
      }));
  staged_.clear();
  return OkStatus();
}

Status S3Upload::Append(const void* data, size_t n) {
  SP_RETURN_IF_ERROR(error_);
  const size_t part = client_->options().part_size;
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (staged_.capacity() < part) staged_.reserve(part);
    const size_t k = std::min(n, part - staged_.size());
    staged_.append(p, k);
    p += k;
    n -= k;
    size_ += k;
    // A full part is sent only once more bytes follow, so the last part is
    // never empty and a one-part object is a plain PUT.
    if (staged_.size() == part && n > 0) {
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
    return client_->PutObject(bucket_, key_, staged_, if_none_match);
  }
  if (if_none_match) {
    return InvalidArgumentError("upload s3://" + bucket_ + "/" + key_ +
                                ": a conditional create must fit in one part");
  }
  if (!staged_.empty()) SP_RETURN_IF_ERROR(StartPart());
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
