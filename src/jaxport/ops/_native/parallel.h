// Splitting a kernel's work over XLA's intra-op thread pool, for the handlers in this folder.

#ifndef JAXPORT_NATIVE_PARALLEL_H_
#define JAXPORT_NATIVE_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "xla/ffi/api/ffi.h"

namespace jaxport {

// Runs `work(begin, end)` over [0, count) in about `chunks_per_thread` chunks per thread, on the
// pool and the calling thread. The caller takes chunks too, so this finishes even when no pool
// thread is free; tasks that start after the work is done find nothing left and touch only the
// shared state they own.
template <typename Work>
void ParallelFor(xla::ffi::ThreadPool& pool, int64_t count, int64_t chunks_per_thread, Work work) {
  const int64_t threads = std::max<int64_t>(1, std::min(pool.num_threads(), count));
  if (threads == 1) {
    work(0, count);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex mutex;
    std::condition_variable finished;
  };
  auto state = std::make_shared<State>();
  const int64_t chunk = std::max<int64_t>(1, count / (chunks_per_thread * threads));
  auto run = [state, count, chunk, &work]() {
    for (int64_t begin; (begin = state->next.fetch_add(chunk)) < count;) {
      const int64_t end = std::min(count, begin + chunk);
      work(begin, end);
      if (state->done.fetch_add(end - begin) + (end - begin) == count) {
        std::lock_guard<std::mutex> lock(state->mutex);
        state->finished.notify_all();
      }
    }
  };
  // A task scheduled here may run after this function returned: it must not read `work`.
  // It can only reach `work` while chunks remain, and chunks remain only while we wait below.
  for (int64_t t = 1; t < threads; ++t) pool.Schedule([run] { run(); });
  run();
  std::unique_lock<std::mutex> lock(state->mutex);
  state->finished.wait(lock, [&] { return state->done.load() == count; });
}

}  // namespace jaxport

#endif  // JAXPORT_NATIVE_PARALLEL_H_
