#include "src/format/checksum.h"

#include <xxhash.h>

namespace shardpoint::internal_format {

uint64_t Checksum64(const void* data, size_t n) { return XXH3_64bits(data, n); }

// XXH3_state_t must be 64-byte aligned; XXH3_createState handles that.
struct ChecksumState::Impl {
  XXH3_state_t* state = nullptr;
  Impl() : state(XXH3_createState()) { XXH3_64bits_reset(state); }
  ~Impl() { XXH3_freeState(state); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
};

ChecksumState::ChecksumState() : impl_(std::make_unique<Impl>()) {}
ChecksumState::~ChecksumState() = default;
ChecksumState::ChecksumState(ChecksumState&&) noexcept = default;
ChecksumState& ChecksumState::operator=(ChecksumState&&) noexcept = default;

void ChecksumState::Reset() {
  if (!impl_) impl_ = std::make_unique<Impl>();
  XXH3_64bits_reset(impl_->state);
}

void ChecksumState::Update(const void* data, size_t n) {
  if (!impl_) impl_ = std::make_unique<Impl>();  // a moved-from state starts afresh
  XXH3_64bits_update(impl_->state, data, n);
}

uint64_t ChecksumState::Digest() const {
  if (!impl_) return Checksum64(nullptr, 0);
  return XXH3_64bits_digest(impl_->state);
}

}  // namespace shardpoint::internal_format
