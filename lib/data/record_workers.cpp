#include "data/record_workers.hpp"

#include <thread>
#include <vector>

namespace dyncp::data {

void for_each_in_slices(std::size_t count, int workers,
                        const std::function<void(std::size_t index, int worker)>& convert) {
  const std::size_t slices = static_cast<std::size_t>(workers < 1 ? 1 : workers);
  const auto run_slice = [&](std::size_t worker) {
    for (std::size_t index = worker * count / slices; index < (worker + 1) * count / slices;
         ++index)
      convert(index, static_cast<int>(worker));
  };
  std::vector<std::jthread> threads;
  threads.reserve(slices - 1);
  for (std::size_t worker = 1; worker < slices; ++worker) threads.emplace_back(run_slice, worker);
  run_slice(0);
}

}  // namespace dyncp::data
