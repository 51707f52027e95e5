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
//
// Stream capture (cudaStreamBeginCapture): work enqueued on a capturing stream does not run: it
// becomes a node of the capture, in enqueue order, and cudaGraphLaunch later enqueues the nodes,
// in that order, as ordinary work (runtime.cpp's graph calls). Nodes keep their arguments as
// enqueued (a kernel's pointers and scalars, a copy's addresses), which is what a GPU's graph bakes
// in. A stream joins a capture by waiting on an event recorded in it (a fork) and must be joined
// back (the origin waits on an event recorded on it after its last node) before the capture ends.
// What a GPU refuses while capturing is refused here with its error, and the capture is invalidated
// where a GPU invalidates it: synchronising or querying a capturing stream, the legacy stream's
// work while a blocking stream captures, a dependency on work outside the capture, and, for a
// thread the capture modes prohibit (cudaThreadExchangeStreamCaptureMode), the potentially unsafe
// calls (allocation, freeing, synchronous copies and fills, device synchronisation).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace cuda_emulator::streams {

// Device work opens device memory to the host thread running it; host work (cudaLaunchHostFunc)
// runs with it closed, as host code; a marker (an event record, a wait) touches nothing.
// device: kernels, copies, memsets, library calls (the allocations they touch open as they touch
// them); shared_device: device work that hands device memory to another process (the emulated
// NCCL's MPI calls), every allocation opened first; host: cudaLaunchHostFunc; marker: events.
enum class Kind { device, shared_device, host, marker };

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

// ---- Capture.

struct Capture;
// A captured node: the work an enqueue would have run.
struct Node {
  const char* what = nullptr;
  Kind kind = Kind::device;
  std::function<void()> work;
};
// Where an event was recorded in a capture: its stream's node count then, and what that stream
// depended on (stream -> node count), so that a wait carries the dependencies on.
struct CaptureMark {
  std::shared_ptr<Capture> capture;
  const Stream* stream = nullptr;
  std::uint64_t position = 0;
  std::map<const Stream*, std::uint64_t> covers;
};

cudaError_t begin_capture(const std::shared_ptr<Stream>& stream, cudaStreamCaptureMode mode);
// Ends the capture begun on `stream`: its nodes, or the error that invalidated it
// (cudaErrorStreamCaptureInvalidated), cudaErrorStreamCaptureUnjoined for a fork not joined back,
// cudaErrorStreamCaptureWrongThread. Every stream leaves the capture either way.
cudaError_t end_capture(const std::shared_ptr<Stream>& stream, std::vector<Node>* nodes);
cudaStreamCaptureStatus capture_status(const std::shared_ptr<Stream>& stream,
                                       unsigned long long* id = nullptr);
bool capturing(const std::shared_ptr<Stream>& stream);
bool any_capture();
// Before enqueueing on `stream`: cudaErrorStreamCaptureInvalidated when its capture has been
// invalidated; for the legacy stream while a blocking stream captures,
// cudaErrorStreamCaptureImplicit (that capture is invalidated).
cudaError_t check_enqueue(const std::shared_ptr<Stream>& stream);
// Invalidates the stream's capture (if any) and returns `status`.
cudaError_t invalidate(const std::shared_ptr<Stream>& stream, cudaError_t status);
// A potentially unsafe call from this thread: cudaErrorStreamCaptureUnsupported when a capture
// prohibits it (the captures that do are invalidated), else cudaSuccess.
cudaError_t check_unsafe_call();
cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode);
// Where an event recorded on a capturing stream now stands (no node is added).
CaptureMark mark(const std::shared_ptr<Stream>& stream);
// `waiter` waits on an event recorded at `mark`: it joins the capture (a fork) or takes the
// dependencies on; cudaErrorStreamCaptureMerge when it captures another sequence.
cudaError_t wait_mark(const std::shared_ptr<Stream>& waiter, const CaptureMark& mark);

}  // namespace cuda_emulator::streams
