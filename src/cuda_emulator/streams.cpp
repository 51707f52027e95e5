#include "cuda_emulator/streams.h"

#include <deque>
#include <string>
#include <algorithm>
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
};

namespace {

struct Registry {
  std::shared_ptr<Stream> legacy = [] {
    auto s = std::make_shared<Stream>();
    s->legacy = true;
    return s;
  }();
  std::vector<std::shared_ptr<Stream>> live;  // in creation order: drains are deterministic
};

Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

int g_drain_depth = 0;

void run(Item& item) {
  if (item.kind == Kind::device) {
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

}  // namespace cuda_emulator::streams
