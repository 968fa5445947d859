// For a program's signal handlers (gguf-* tools install them in run_tool): what libgguf needs
// done when a signal ends the process while it writes or reads mapped inputs. All three are
// async-signal-safe.
#pragma once

#include <cstddef>

namespace gguf {

// Unlinks every temp file an output being written holds right now: for handlers of SIGINT,
// SIGTERM, SIGHUP, SIGQUIT and SIGBUS, before the process dies of the signal.
void remove_temp_files_from_signal_handler() noexcept;

// True if the signal was recorded for the commit of a split set to raise again once the whole
// set (or none of it) is in place: the handler then returns. False: handle it now.
bool defer_termination_signal(int sig) noexcept;

// For SIGBUS (a mapped input that shrinks, or whose storage fails, while it is read): writes
// "NAME: at byte N" for the mapped input holding addr into buf (cut at size bytes) and returns
// its length; 0 when addr lies in no input libgguf mapped.
size_t describe_mapped_address(const void* addr, char* buf, size_t size) noexcept;

}  // namespace gguf
