// 0 threads = all cores, for every operation that takes a thread count.
#include "gguf/base/threads.h"

#include <algorithm>
#include <thread>

namespace gguf {

unsigned thread_count(unsigned threads) {
  return threads ? threads : std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace gguf
