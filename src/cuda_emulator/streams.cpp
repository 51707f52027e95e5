#include "cuda_emulator/streams.h"

#include <algorithm>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"
#include "cuda_emulator/memory.h"

namespace cuda_emulator::streams {

struct Item {
  std::uint64_t position = 0;
  const char* what = nullptr;
  Kind kind = Kind::device;
  std::function<void()> work;
  std::vector<Ticket> after;  // run first
};

struct Stream {
  bool legacy = false;
  bool blocking = true;  // takes part in the legacy stream's ordering
  std::deque<Item> pending;
  std::uint64_t enqueued = 0, completed = 0;
  // While it takes part in a capture: the capture, the capture's node count after this stream's
  // last node, and what this stream depends on in the capture (stream -> node count).
  std::shared_ptr<Capture> capture;
  std::uint64_t last = 0;
  std::map<const Stream*, std::uint64_t> covers;
};

struct Capture {
  unsigned long long id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  std::shared_ptr<Stream> origin;
  cudaError_t error = cudaSuccess;  // what invalidated it
  std::vector<Node> nodes;
  std::vector<std::shared_ptr<Stream>> members;  // the origin, then the forks
};

namespace {

struct Registry {
  std::shared_ptr<Stream> legacy = [] {
    auto s = std::make_shared<Stream>();
    s->legacy = true;
    return s;
  }();
  std::vector<std::shared_ptr<Stream>> live;       // in creation order: drains are deterministic
  std::vector<std::shared_ptr<Capture>> captures;  // in progress
  unsigned long long capture_ids = 0;
};

thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;

Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

int g_drain_depth = 0;

void run(Item& item) {
  if (item.kind == Kind::device || item.kind == Kind::shared_device) {
    if (item.kind == Kind::shared_device)
      memory::open_all_device_memory();
    else
      memory::set_device_access(true);
    const char* previous = running_device_work();
    set_running_device_work(item.what);
    item.work();
    memory::check_canaries(item.what);
    set_running_device_work(previous);
  } else if (item.kind == Kind::host) {
    memory::set_device_access(false);
    item.work();
  } else if (item.work) {
    item.work();
  }
}

void drain_to(Stream& stream, std::uint64_t position) {
  ++g_drain_depth;
  while (stream.completed < position) {
    if (stream.pending.empty()) fault("a stream drained past its last work");
    Item item = std::move(stream.pending.front());
    stream.pending.pop_front();
    for (const Ticket& t : item.after) drain_to(*t.stream, t.position);
    run(item);
    stream.completed = item.position;
  }
  if (--g_drain_depth == 0) memory::set_device_access(false);
}

}  // namespace

std::shared_ptr<Stream> find(cudaStream_t handle) {
  Registry& r = registry();
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread)
    return r.legacy;
  auto it = std::find_if(r.live.begin(), r.live.end(), [&](const std::shared_ptr<Stream>& s) {
    return reinterpret_cast<cudaStream_t>(s.get()) == handle;
  });
  return it == r.live.end() ? nullptr : *it;
}

cudaError_t create(cudaStream_t* handle, unsigned flags) {
  if (!handle) return cudaErrorInvalidValue;
  if (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) return cudaErrorInvalidValue;
  auto s = std::make_shared<Stream>();
  s->blocking = !(flags & cudaStreamNonBlocking);
  *handle = reinterpret_cast<cudaStream_t>(s.get());
  registry().live.push_back(std::move(s));
  return cudaSuccess;
}

// CUDA lets the work already enqueued finish after cudaStreamDestroy returns; here it runs now.
cudaError_t destroy(cudaStream_t handle) {
  Registry& r = registry();
  std::shared_ptr<Stream> s = handle ? find(handle) : nullptr;
  if (!s || s->legacy) return cudaErrorInvalidResourceHandle;
  drain_stream(s);
  r.live.erase(std::find(r.live.begin(), r.live.end(), s));
  return cudaSuccess;
}

Ticket enqueue(const std::shared_ptr<Stream>& stream, const char* what, Kind kind,
               std::function<void()> work, const Ticket* after) {
  Registry& r = registry();
  if (const std::shared_ptr<Capture>& capture = stream->capture) {
    // Captured, not run (check_enqueue refused the call if the capture is invalidated).
    if (capture->error == cudaSuccess) {
      capture->nodes.push_back({what, kind, std::move(work)});
      stream->last = capture->nodes.size();
    }
    return {};
  }
  Item item;
  item.position = ++stream->enqueued;
  item.what = what;
  item.kind = kind;
  item.work = std::move(work);
  if (after && after->stream && after->position > after->stream->completed)
    item.after.push_back(*after);
  if (stream->legacy) {
    for (const auto& other : r.live)
      if (other->blocking && other->enqueued > other->completed)
        item.after.push_back({other, other->enqueued});
  } else if (stream->blocking && r.legacy->enqueued > r.legacy->completed) {
    item.after.push_back({r.legacy, r.legacy->enqueued});
  }
  stream->pending.push_back(std::move(item));
  return {stream, stream->enqueued};
}

void drain(const Ticket& ticket) {
  if (ticket.stream) drain_to(*ticket.stream, ticket.position);
}

bool done(const Ticket& ticket) {
  return !ticket.stream || ticket.stream->completed >= ticket.position;
}

void drain_stream(const std::shared_ptr<Stream>& stream) {
  drain_to(*stream, stream->enqueued);
}

bool stream_idle(const std::shared_ptr<Stream>& stream) {
  return stream->completed == stream->enqueued;
}

Ticket tail(const std::shared_ptr<Stream>& stream) {
  return {stream, stream->enqueued};
}

void drain_all() {
  Registry& r = registry();
  for (;;) {
    bool any = false;
    if (!stream_idle(r.legacy)) {
      drain_stream(r.legacy);
      any = true;
    }
    const std::vector<std::shared_ptr<Stream>> live = r.live;
    for (const auto& s : live)
      if (!stream_idle(s)) {
        drain_stream(s);
        any = true;
      }
    if (!any) return;
  }
}

// ---- Capture.

namespace {

void leave(Capture& capture) {
  for (const auto& s : capture.members) {
    s->capture.reset();
    s->last = 0;
    s->covers.clear();
  }
  auto& list = registry().captures;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const std::shared_ptr<Capture>& c) { return c.get() == &capture; }),
             list.end());
}

void take_covers(Stream& waiter, const CaptureMark& mark) {
  for (const auto& [s, position] : mark.covers)
    waiter.covers[s] = std::max(waiter.covers[s], position);
  waiter.covers[mark.stream] = std::max(waiter.covers[mark.stream], mark.position);
}

}  // namespace

cudaError_t begin_capture(const std::shared_ptr<Stream>& stream, cudaStreamCaptureMode mode) {
  if (stream->legacy) return cudaErrorStreamCaptureUnsupported;
  if (stream->capture) return cudaErrorIllegalState;
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return cudaErrorInvalidValue;
  Registry& r = registry();
  auto c = std::make_shared<Capture>();
  c->id = ++r.capture_ids;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = stream;
  c->members.push_back(stream);
  stream->capture = c;
  stream->last = 0;
  stream->covers.clear();
  r.captures.push_back(std::move(c));
  return cudaSuccess;
}

cudaError_t end_capture(const std::shared_ptr<Stream>& stream, std::vector<Node>* nodes) {
  const std::shared_ptr<Capture> c = stream->capture;
  if (!c) return cudaErrorIllegalState;
  if (c->origin != stream) return cudaErrorStreamCaptureUnmatched;
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return cudaErrorStreamCaptureWrongThread;
  // A fork's last node must be behind something the origin waited on (directly or through the
  // streams it waited on).
  bool unjoined = false;
  for (const auto& s : c->members) {
    if (s == stream || s->last == 0) continue;
    const auto it = stream->covers.find(s.get());
    if (it == stream->covers.end() || it->second < s->last) unjoined = true;
  }
  leave(*c);  // every stream leaves the capture, whatever the outcome
  if (c->error != cudaSuccess) return cudaErrorStreamCaptureInvalidated;
  if (unjoined) return cudaErrorStreamCaptureUnjoined;
  *nodes = std::move(c->nodes);
  return cudaSuccess;
}

cudaStreamCaptureStatus capture_status(const std::shared_ptr<Stream>& stream,
                                       unsigned long long* id) {
  const std::shared_ptr<Capture>& c = stream->capture;
  if (id) *id = c ? c->id : 0;
  if (!c) return cudaStreamCaptureStatusNone;
  return c->error == cudaSuccess ? cudaStreamCaptureStatusActive
                                 : cudaStreamCaptureStatusInvalidated;
}

bool capturing(const std::shared_ptr<Stream>& stream) {
  return stream->capture != nullptr;
}

bool any_capture() {
  return !registry().captures.empty();
}

cudaError_t invalidate(const std::shared_ptr<Stream>& stream, cudaError_t status) {
  if (stream->capture && stream->capture->error == cudaSuccess) stream->capture->error = status;
  return status;
}

cudaError_t check_enqueue(const std::shared_ptr<Stream>& stream) {
  if (stream->capture && stream->capture->error != cudaSuccess)
    return cudaErrorStreamCaptureInvalidated;
  if (stream->legacy) {
    // The legacy stream's work would wait for a capturing blocking stream's work.
    cudaError_t status = cudaSuccess;
    for (const auto& c : registry().captures)
      for (const auto& s : c->members)
        if (s->blocking) {
          if (c->error == cudaSuccess) c->error = cudaErrorStreamCaptureImplicit;
          status = cudaErrorStreamCaptureImplicit;
        }
    return status;
  }
  return cudaSuccess;
}

cudaError_t check_unsafe_call() {
  if (t_capture_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  cudaError_t status = cudaSuccess;
  for (const auto& c : registry().captures) {
    if (c->mode == cudaStreamCaptureModeRelaxed) continue;
    const bool mine = c->thread == std::this_thread::get_id();
    const bool global =
        t_capture_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal;
    if (mine || global) {
      if (c->error == cudaSuccess) c->error = cudaErrorStreamCaptureUnsupported;
      status = cudaErrorStreamCaptureUnsupported;
    }
  }
  return status;
}

cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode) {
  if (!mode) return cudaErrorInvalidValue;
  if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
      *mode != cudaStreamCaptureModeRelaxed)
    return cudaErrorInvalidValue;
  std::swap(*mode, t_capture_mode);
  return cudaSuccess;
}

CaptureMark mark(const std::shared_ptr<Stream>& stream) {
  CaptureMark m;
  m.capture = stream->capture;
  m.stream = stream.get();
  m.position = stream->last;
  m.covers = stream->covers;
  return m;
}

cudaError_t wait_mark(const std::shared_ptr<Stream>& waiter, const CaptureMark& mark) {
  const std::shared_ptr<Capture>& c = mark.capture;
  const auto& active = registry().captures;
  if (std::find(active.begin(), active.end(), c) == active.end())
    return cudaErrorCapturedEvent;  // recorded in a capture that has ended
  if (waiter->capture && waiter->capture != c) {
    invalidate(waiter, cudaErrorStreamCaptureMerge);
    if (c->error == cudaSuccess) c->error = cudaErrorStreamCaptureMerge;
    return cudaErrorStreamCaptureMerge;
  }
  if (c->error != cudaSuccess) return cudaErrorStreamCaptureInvalidated;
  if (!waiter->capture) {
    if (!stream_idle(waiter)) {
      // Its earlier work is outside the capture: in-stream order may cross the boundary on a
      // GPU; here the fork runs that work first, as the GPU's order would.
      drain_stream(waiter);
    }
    waiter->capture = c;
    waiter->last = 0;
    waiter->covers.clear();
    c->members.push_back(waiter);
  }
  take_covers(*waiter, mark);
  return cudaSuccess;
}

}  // namespace cuda_emulator::streams
