#include "src/format/checksum.h"

#include <xxhash.h>

#include <new>

#include "src/format/checksum_kernels.h"

namespace shardpoint::internal_format {
#define SP_CHECKSUM_KERNELS_NAME "libxxhash"
#include "src/format/checksum_kernels.inc"

const ChecksumKernels& BaselineChecksumKernels() { return kKernels; }

const ChecksumKernels& ActiveChecksumKernels() {
  static const ChecksumKernels& active = [] {
    const ChecksumKernels* avx2 = Avx2ChecksumKernels();
    return avx2 ? *avx2 : kKernels;
  }();
  return active;
}

uint64_t Checksum64(const void* data, size_t n) { return ActiveChecksumKernels().oneshot(data, n); }

struct ChecksumState::Impl {
  const ChecksumKernels& k = ActiveChecksumKernels();
  void* state = nullptr;
  Impl() : state(k.new_state()) {
    if (!state) throw std::bad_alloc();
  }
  ~Impl() { k.free_state(state); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
};

ChecksumState::ChecksumState() : impl_(std::make_unique<Impl>()) {}
ChecksumState::~ChecksumState() = default;
ChecksumState::ChecksumState(ChecksumState&&) noexcept = default;
ChecksumState& ChecksumState::operator=(ChecksumState&&) noexcept = default;

void ChecksumState::Reset() {
  if (!impl_) impl_ = std::make_unique<Impl>();
  impl_->k.reset(impl_->state);
}

void ChecksumState::Update(const void* data, size_t n) {
  if (!impl_) impl_ = std::make_unique<Impl>();  // a moved-from state starts afresh
  impl_->k.update(impl_->state, data, n);
}

uint64_t ChecksumState::Digest() const {
  if (!impl_) return Checksum64(nullptr, 0);
  return impl_->k.digest(impl_->state);
}

}  // namespace shardpoint::internal_format
