// Streams and events of the emulated device. Work enqueued on a stream never runs at the enqueue:
// it runs, in stream order, when something drains the stream (a synchronisation, a blocking copy,
// a query). Draining stream A runs A's work and, first, whatever that work waits for: events
// (cudaStreamWaitEvent) and the legacy default stream's implicit ordering. Work on two streams
// with nothing between them runs in whichever order the drains come in, so a missing event shows.
//
// The legacy default stream (0, cudaStreamLegacy) as CUDA defines it: its work waits for all work
// enqueued before it on every blocking stream, and work on a blocking stream waits for all legacy
// work enqueued before it; non-blocking streams (cudaStreamNonBlocking) take no part. Simplified:
// cudaStreamPerThread is the legacy stream, and every device shares one set of streams.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace cuda_emulator::streams {

// Device work opens device memory to the host thread running it; host work (cudaLaunchHostFunc)
// runs with it closed, as host code; a marker (an event record, a wait) touches nothing.
enum class Kind { device, host, marker };

struct Stream;
// A place in a stream: done when the stream has run its work up to `position`.
struct Ticket {
  std::shared_ptr<Stream> stream;
  std::uint64_t position = 0;
};

// Null for a handle that is no live stream (a destroyed one).
std::shared_ptr<Stream> find(cudaStream_t handle);
cudaError_t create(cudaStream_t* handle, unsigned flags);
cudaError_t destroy(cudaStream_t handle);

Ticket enqueue(const std::shared_ptr<Stream>& stream, const char* what, Kind kind,
               std::function<void()> work, const Ticket* after = nullptr);
// Runs the stream's work up to the ticket (and what that waits for).
void drain(const Ticket& ticket);
bool done(const Ticket& ticket);
// Every stream, all its work.
void drain_all();
void drain_stream(const std::shared_ptr<Stream>& stream);
bool stream_idle(const std::shared_ptr<Stream>& stream);
Ticket tail(const std::shared_ptr<Stream>& stream);

}  // namespace cuda_emulator::streams
