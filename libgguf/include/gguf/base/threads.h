// How many threads a "threads" option asks for: every option and operation of libgguf that
// takes a thread count reads 0 as "all cores".
#pragma once

namespace gguf {

// threads, or the number of cores when it is 0 (at least 1).
unsigned thread_count(unsigned threads);

}  // namespace gguf
