// A program outside the project that uses the installed (or add_subdirectory'd)
// library through its public headers only: two ranks as threads save a
// row-split tensor, one rank loads it whole, every element is compared.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "shardpoint/layout.h"

namespace sp = shardpoint;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<float> w(8 * 4);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * static_cast<float>(i) - 3.0f;
  for (const sp::Status& s : sp::RunThreadRanks(2, [&](sp::Comm& comm) -> sp::Status {
         sp::State state;
         state.tensors.push_back(*sp::SplitTensor("w", sp::DType::kF32, w.data() + comm.rank() * 16,
                                                  {8, 4}, 0, comm.rank(), 2));
         return sp::Save(state, dir, comm).status();
       })) {
    if (!s.ok()) {
      std::fprintf(stderr, "save: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::vector<float> back(w.size(), 0.0f);
  sp::State state;
  state.tensors.push_back(sp::WholeTensor("w", sp::DType::kF32, back.data(), {8, 4}));
  std::unique_ptr<sp::Comm> comm = sp::MakeSingleComm();
  sp::Result<sp::LoadResult> r = sp::Load(state, dir, *comm);
  if (!r.ok()) {
    std::fprintf(stderr, "load: %s\n", r.status().ToString().c_str());
    return 1;
  }
  if (back != w) {
    std::fprintf(stderr, "loaded values differ from the saved ones\n");
    return 1;
  }
  std::printf("consumer: saved on 2 ranks, loaded on 1, %zu floats equal\n", w.size());
  return 0;
}
