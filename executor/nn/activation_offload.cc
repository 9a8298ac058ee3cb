// verl's AsyncDoubleBufferGroupOffloadHandler (verl/utils/activation_offload.py) over LibTorch's
// C++ saved-variable hooks.
#include "executor/nn/activation_offload.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "model/errors.h"

namespace shardtune::exec {

namespace {

thread_local ActivationOffload::Impl* tls_active = nullptr;

// A saved tensor's tag: (group, index in the group), verl's tensor_tag.
int64_t TagOf(int group, int index) { return (static_cast<int64_t>(group) << 32) | static_cast<uint32_t>(index); }
int GroupOf(int64_t tag) { return static_cast<int>(tag >> 32); }

// verl dedups a group's copies by (storage data_ptr + storage_offset, dtype)
// (_get_unique_tensor_key) and views the one copy in each tensor's shape: a matmul's
// [B, h, S, S] input and the [B*h, S, S] view its bmm saves are one copy. That is right when both
// are row-major (contiguous) over the same elements; two views at one offset of which one is not
// (a transpose) would read each other's layout there, so those keep their sizes and strides in
// the key (their own copies).
using CopyKey = std::tuple<const c10::StorageImpl*, int64_t, int, int64_t, std::vector<int64_t>, std::vector<int64_t>>;

CopyKey KeyOf(const at::Tensor& t) {
  const bool row_major = t.is_contiguous();
  return {t.storage().unsafeGetStorageImpl(), t.storage_offset(), static_cast<int>(t.scalar_type()), t.numel(),
          row_major ? std::vector<int64_t>{} : t.sizes().vec(), row_major ? std::vector<int64_t>{} : t.strides().vec()};
}

}  // namespace

struct ActivationOffload::Impl {
  Impl(int layers, const at::Device& d) : num_layers(layers), num_offload_group(layers - 1), device(d) {
    // verl enables it for three layers or more (enable_activation_offloading); a handler over the
    // first k + 1 of them (Plan::activation_offload_blocks) has two or more.
    SHARDTUNE_CHECK(layers >= 2) << "the offload handler needs two layers or more, got " << layers;
    // layer_window_map (AsyncDoubleBufferGroupOffloadHandler.__init__): the layer at whose forward
    // commit group i's copy is waited for and its device tensors dropped.
    int constant = 0;
    for (int i = 0; i < num_offload_group; ++i) {
      int w = (num_layers / num_offload_group) * (i + 1) - 1;
      if (i < num_layers % num_offload_group) {
        w += i + 1;
        constant = i + 1;
      } else {
        w += constant;
      }
      window.push_back(w);
    }
    if (device.is_cuda()) {
      c10::impl::VirtualGuardImpl impl(device.type());
      d2h = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
      h2d = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
    }
  }

  struct Entry {
    at::Tensor tensor;          // on the device: before the copy, or brought back
    int64_t copy = -1;          // >= 0: only on the host, in this copy
    std::vector<int64_t> sizes;  // the tensor's shape (the copy is viewed in it)
  };
  struct Copy {
    int64_t id = 0;
    at::Tensor source;  // the device tensor, until the copy started
    at::Tensor host;
  };

  // Tensors of a forward and their states (tensor_tag_to_state), the device tensors kept alive
  // while their copies run (tensor_tag_to_buf), and each offloaded group's copies
  // (group_offload_mapping).
  int num_layers, num_offload_group;
  at::Device device;
  std::vector<int> window;
  int current_group = 0, count_in_group = 0, offloaded_group_count = 0;
  std::map<int64_t, Entry> state;
  std::map<int64_t, at::Tensor> buf;
  std::map<int, std::vector<Copy>> group_copies;
  std::unordered_set<const c10::StorageImpl*> params;
  int64_t host_bytes = 0, next_copy = 0;
  Observer observer;
  std::optional<c10::Stream> d2h, h2d;

  bool cuda() const { return d2h.has_value(); }
  c10::Stream Compute() const { return c10::impl::VirtualGuardImpl(device.type()).getStream(device); }
  // `waiter` waits for the work queued on `on` so far (torch.cuda.Stream.wait_stream).
  void WaitStream(const c10::Stream& waiter, const c10::Stream& on) const {
    c10::Event e(device.type());
    e.record(on);
    e.block(waiter);
  }

  void Reset() {
    state.clear();
    buf.clear();
    group_copies.clear();
    current_group = count_in_group = offloaded_group_count = 0;
    host_bytes = next_copy = 0;
  }

  // tensor_push: a tag for tensors the filter lets through, else the tensor itself (*kept).
  int64_t Push(const at::Tensor& t, at::Tensor* kept) {
    if (params.count(t.storage().unsafeGetStorageImpl()) != 0) {
      *kept = t;
      return -1;
    }
    const int64_t tag = TagOf(current_group, count_in_group++);
    SHARDTUNE_CHECK(state.count(tag) == 0) << "saved tensor tag reused";
    state[tag] = Entry{t, -1, {}};
    if (current_group < num_offload_group) buf[tag] = t;
    return tag;
  }

  // tensor_pop: the tensor, forgotten by the handler (the graph node holds it while it needs it).
  at::Tensor Pop(int64_t tag) {
    auto it = state.find(tag);
    SHARDTUNE_CHECK(it != state.end()) << "a saved tensor of layer " << GroupOf(tag)
                                       << " was read twice or after the next forward";
    SHARDTUNE_CHECK(it->second.copy < 0) << "a saved tensor of layer " << GroupOf(tag)
                                         << " was read before its layer's reload";
    at::Tensor t = std::move(it->second.tensor);
    state.erase(it);
    buf.erase(tag);
    return t;
  }

  // A host tensor like `t` (contiguous): pinned for CUDA (torch.empty(pin_memory=True)); on CPU
  // ranks a heap buffer outside LibTorch's allocator, so the rank's tracked (device) memory drops.
  static at::Tensor HostLike(const at::Tensor& t, bool pinned) {
    at::TensorOptions o = at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU);
    if (pinned) return at::empty(t.sizes(), o.pinned_memory(true));
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    void* p = std::malloc(bytes > 0 ? bytes : 1);
    SHARDTUNE_CHECK(p != nullptr) << "host memory for an offloaded activation (" << bytes << " B)";
    return at::from_blob(p, t.sizes(), [](void* q) { std::free(q); }, o);
  }

  // bulk_offload_group: every tensor of the group gets its state set to its copy.
  void BulkOffload(int group) {
    std::optional<c10::StreamGuard> on;
    if (cuda()) on.emplace(*d2h);
    std::map<CopyKey, size_t> index;
    std::vector<Copy>& copies = group_copies[group];
    for (auto it = state.lower_bound(TagOf(group, 0)); it != state.end() && GroupOf(it->first) == group; ++it) {
      Entry& e = it->second;
      SHARDTUNE_CHECK(e.copy < 0 && e.tensor.defined()) << "layer " << group << " offloaded twice";
      auto [at, fresh] = index.emplace(KeyOf(e.tensor), copies.size());
      if (fresh) copies.push_back(Copy{next_copy++, e.tensor, {}});
      e.copy = copies[at->second].id;
      e.sizes = e.tensor.sizes().vec();
      e.tensor = at::Tensor();  // the device tensor stays alive in `buf` until the window's wait
    }
    for (Copy& c : copies) {
      c.host = HostLike(c.source, cuda());
      c.host.copy_(c.source, /*non_blocking=*/cuda());
      host_bytes += static_cast<int64_t>(c.host.numel()) * c.host.element_size();
      if (observer) observer(false, c.id, c.source);
      c.source = at::Tensor();
    }
  }

  // bulk_reload_group: the group's copies back on the device, its states the tensors again.
  void BulkReload(int group) {
    auto g = group_copies.find(group);
    SHARDTUNE_CHECK(g != group_copies.end()) << "layer " << group << " reloaded without an offload";
    std::map<int64_t, at::Tensor> back;
    {
      std::optional<c10::StreamGuard> on;
      if (cuda()) on.emplace(*h2d);
      for (Copy& c : g->second) {
        at::Tensor d = cuda() ? c.host.to(device, /*non_blocking=*/true)
                              : at::empty(c.host.sizes(), c.host.options()).copy_(c.host);
        if (observer) observer(true, c.id, d);
        back[c.id] = std::move(d);
      }
    }
    group_copies.erase(g);
    for (auto it = state.lower_bound(TagOf(group, 0)); it != state.end() && GroupOf(it->first) == group; ++it) {
      Entry& e = it->second;
      if (e.copy < 0) continue;
      e.tensor = back.at(e.copy).view(e.sizes);
      e.copy = -1;
    }
  }

  // synchronize_on_group_commit_forward + on_group_commit_forward.
  void OnCommitForward() {
    const int g = current_group;
    if (g == 0) {
      if (cuda()) WaitStream(*d2h, Compute());
      BulkOffload(0);
    }
    if (offloaded_group_count < num_offload_group && window[static_cast<size_t>(offloaded_group_count)] == g) {
      if (cuda()) {
        WaitStream(*d2h, Compute());
        WaitStream(Compute(), *d2h);
      }
      for (auto it = buf.begin(); it != buf.end();) {
        it = GroupOf(it->first) == offloaded_group_count ? buf.erase(it) : std::next(it);
      }
      if (offloaded_group_count < num_offload_group - 1) BulkOffload(offloaded_group_count + 1);
      ++offloaded_group_count;
    }
    ++current_group;
    count_in_group = 0;
  }

  // on_group_commit_backward.
  void OnCommitBackward() {
    --current_group;
    SHARDTUNE_CHECK(current_group >= 0) << "more backward commits than layers";
    if (offloaded_group_count > 0 && window[static_cast<size_t>(offloaded_group_count - 1)] == current_group) {
      if (cuda()) {
        WaitStream(*h2d, Compute());
        WaitStream(Compute(), *h2d);
      }
      BulkReload(offloaded_group_count - 1);
      offloaded_group_count -= offloaded_group_count > 1 ? 1 : 0;
    }
    if (current_group == 0) {
      if (cuda()) WaitStream(Compute(), *h2d);
      offloaded_group_count = 0;
    }
  }
};

namespace {

// The hooks of one saved tensor (verl's CpuOffloadHookWithOffloadHandler on_save_for_backward /
// on_get_saved_tensor).
struct OffloadHooks final : public torch::autograd::SavedVariableHooks {
  explicit OffloadHooks(ActivationOffload::Impl* h) : handler(h) {}
  void call_pack_hook(const at::Tensor& t) override { tag = handler->Push(t, &kept); }
  at::Tensor call_unpack_hook() override { return tag < 0 ? kept : handler->Pop(tag); }
  ActivationOffload::Impl* handler;
  int64_t tag = -1;
  at::Tensor kept;
};

// LibTorch's engine, with hooks for the tensors saved while a layer context is active on the
// saving thread (PythonEngine overrides the same method for torch.autograd.graph's hooks).
class HookEngine final : public torch::autograd::Engine {
 public:
  static torch::autograd::Engine& Get() {
    static HookEngine engine;
    return engine;
  }
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (tls_active == nullptr) return nullptr;
    return std::make_unique<OffloadHooks>(tls_active);
  }
};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// GroupCommitFunction: an identity whose forward and backward are the handler's commits.
struct GroupCommit : public torch::autograd::Function<GroupCommit> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t handler) {
    ctx->saved_data["h"] = handler;
    reinterpret_cast<ActivationOffload::Impl*>(static_cast<intptr_t>(handler))->OnCommitForward();
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    reinterpret_cast<ActivationOffload::Impl*>(static_cast<intptr_t>(ctx->saved_data["h"].toInt()))
        ->OnCommitBackward();
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

void InstallSavedTensorHooksEngine() {
  static std::once_flag once;
  std::call_once(once, [] { torch::autograd::set_default_engine_stub(&HookEngine::Get); });
}

ActivationOffload::ActivationOffload(int layers, const at::Device& device)
    : impl_(std::make_unique<Impl>(layers, device)) {
  InstallSavedTensorHooksEngine();
}

ActivationOffload::~ActivationOffload() {
  if (tls_active == impl_.get()) tls_active = nullptr;
}

void ActivationOffload::EnterLayer(const std::vector<at::Tensor>& params) {
  Impl& h = *impl_;
  SHARDTUNE_CHECK(tls_active == nullptr) << "layer contexts do not nest";
  // A forward's first layer: what an earlier step left (tensors no backward read) goes.
  if (h.current_group == 0 || h.current_group >= h.num_layers) h.Reset();
  h.params.clear();
  for (const at::Tensor& p : params) {
    if (p.defined()) h.params.insert(p.storage().unsafeGetStorageImpl());
  }
  tls_active = &h;
}

at::Tensor ActivationOffload::LeaveLayer(const at::Tensor& y) {
  tls_active = nullptr;
  return GroupCommit::apply(y, static_cast<int64_t>(reinterpret_cast<intptr_t>(impl_.get())));
}

void ActivationOffload::CancelLayer() { tls_active = nullptr; }

int64_t ActivationOffload::host_bytes() const { return impl_->host_bytes; }

void ActivationOffload::set_observer(Observer f) { impl_->observer = std::move(f); }

}  // namespace shardtune::exec
