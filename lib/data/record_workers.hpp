#pragma once
// dataset.num_workers: the threads that turn input lines into records (parse, render the chat
// template, tokenize) while a dataset is prepared. Lines are converted a batch at a time; each
// thread converts one contiguous slice of the batch, and the records are handed on in input
// order on the calling thread, so the prepared cache is byte-identical for any thread count.
//
//   batch of 8 lines, 3 workers: worker 0 (the calling thread) lines 0-1, worker 1 lines 2-4,
//   worker 2 lines 5-7 (slice w is [w * 8 / 3, (w + 1) * 8 / 3))

#include <cstddef>
#include <functional>

namespace dyncp::data {

// Calls convert(index, worker) once for every index in [0, count), worker w taking the slice
// [w * count / workers, (w + 1) * count / workers); worker 0 is the calling thread, the others
// are threads started for this call and joined before it returns. `workers` < 1 counts as 1
// (everything on the calling thread). `convert` must not throw: capture errors per index.
void for_each_in_slices(std::size_t count, int workers,
                        const std::function<void(std::size_t index, int worker)>& convert);

}  // namespace dyncp::data
