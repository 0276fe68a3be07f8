// cuDNN's SDPA forward and backward graphs (cudnn-frontend) on THD blocks; see
// cudnn_attention.hpp for the layout. Host code only: the graphs, their cache, one handle and
// one workspace per process.
#include "cudnn_attention.hpp"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/error.hpp"
#include "cuda_check.hpp"

namespace dyncp::kernels {
namespace {

namespace fe = cudnn_frontend;
using Graph = fe::graph::Graph;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;

enum Uid : std::int64_t {
  q_uid = 1,
  k_uid,
  v_uid,
  o_uid,
  stats_uid,
  dout_uid,
  dq_uid,
  dk_uid,
  dv_uid,
  seq_q_uid,
  seq_kv_uid,
  q_offset_uid,
  kv_offset_uid,
  stats_offset_uid
};

std::string message_of(fe::error_t error) {
  return error.get_message();
}

void check(fe::error_t error, const char* what) {
  if (!error.is_good()) {
    core::throw_runtime_error(std::string("cuDNN attention: ") + what + ": " + message_of(error));
  }
}

class Library {
 public:
  static Library& get() {
    static Library* library = new Library;  // never destroyed: see ops::cuda::install_backend
    return *library;
  }
  cudnnHandle_t handle() {
    if (handle_ == nullptr) {
      const cudnnStatus_t status = cudnnCreate(&handle_);
      if (status != CUDNN_STATUS_SUCCESS) {
        handle_ = nullptr;
        core::throw_runtime_error(std::string("cudnnCreate: ") + cudnnGetErrorString(status));
      }
    }
    return handle_;
  }
  void* workspace(std::int64_t bytes) {
    if (bytes > workspace_bytes_) {
      if (workspace_ != nullptr) {
        DYNCP_CUDA_CHECK(cudaDeviceSynchronize());
        DYNCP_CUDA_CHECK(cudaFree(workspace_));
        workspace_ = nullptr;
      }
      DYNCP_CUDA_CHECK(cudaMalloc(&workspace_, static_cast<std::size_t>(bytes)));
      workspace_bytes_ = bytes;
    }
    return workspace_;
  }
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<Graph>> graphs;

 private:
  cudnnHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::int64_t workspace_bytes_ = 0;
};

struct Shape {
  CudnnAttentionDims dims;
  bool causal = true;
  int left_bound = 0;
  std::int64_t batch = 1, max_q = 1, max_kv = 1;
  std::int64_t total_q = 1, total_kv = 1;  // bounds on the packed rows (the backward's workspace)
};

std::string key_of(const Shape& s, bool backward) {
  return std::to_string(backward) + "/" + std::to_string(s.dims.q_heads) + "/" +
         std::to_string(s.dims.kv_heads) + "/" + std::to_string(s.dims.head_dim) + "/" +
         std::to_string(s.dims.scale) + "/" + std::to_string(s.causal) + "/" +
         std::to_string(s.left_bound) + "/" + std::to_string(s.batch) + "/" +
         std::to_string(s.max_q) + "/" + std::to_string(s.max_kv) + "/" +
         std::to_string(s.total_q) + "/" + std::to_string(s.total_kv);
}

TensorAttr int_tensor(Graph& graph, const char* name, std::int64_t uid, std::int64_t n) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({n, 1, 1, 1})
                          .set_stride({1, 1, 1, 1})
                          .set_data_type(fe::DataType_t::INT32));
}

// [batch, heads, rows, d] over THD rows: row stride heads·d, head stride d; the batch stride is
// unused (ragged offsets place each block) and set out of the way, as cuDNN checks strides
// against the ragged dim.
fe::graph::Tensor_attributes thd(const char* name, std::int64_t uid, const Shape& s,
                                 std::int64_t heads, std::int64_t rows, std::int64_t d) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({s.batch, heads, rows, d})
      .set_stride({INT_MAX, d, heads * d, 1});
}

void set_thd(const TensorAttr& t, std::int64_t uid, const Shape& s, std::int64_t heads,
             std::int64_t rows, std::int64_t d, const TensorAttr& offsets) {
  t->set_output(true)
      .set_uid(uid)
      .set_dim({s.batch, heads, rows, d})
      .set_stride({INT_MAX, d, heads * d, 1})
      .set_ragged_offset(offsets);
}

template <typename Attributes>
void set_mask(Attributes& attributes, const Shape& s) {
  attributes.set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT);
  if (s.causal) attributes.set_diagonal_band_right_bound(0);
  if (s.left_bound > 0) attributes.set_diagonal_band_left_bound(s.left_bound);
}

std::shared_ptr<Graph> new_graph() {
  auto graph = std::make_shared<Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// The graph's operands: Q, K, V with their ragged offsets and the per-block lengths.
struct Operands {
  TensorAttr q, k, v, seq_q, seq_kv, q_offset, kv_offset, stats_offset;
};

Operands operands(Graph& graph, const Shape& s) {
  const std::int64_t hq = s.dims.q_heads, hkv = s.dims.kv_heads, d = s.dims.head_dim;
  Operands x;
  x.q_offset = int_tensor(graph, "q_offset", q_offset_uid, s.batch + 1);
  x.kv_offset = int_tensor(graph, "kv_offset", kv_offset_uid, s.batch + 1);
  x.stats_offset = int_tensor(graph, "stats_offset", stats_offset_uid, s.batch + 1);
  x.seq_q = int_tensor(graph, "seq_q", seq_q_uid, s.batch);
  x.seq_kv = int_tensor(graph, "seq_kv", seq_kv_uid, s.batch);
  x.q = graph.tensor(thd("q", q_uid, s, hq, s.max_q, d).set_ragged_offset(x.q_offset));
  x.k = graph.tensor(thd("k", k_uid, s, hkv, s.max_kv, d).set_ragged_offset(x.kv_offset));
  x.v = graph.tensor(thd("v", v_uid, s, hkv, s.max_kv, d).set_ragged_offset(x.kv_offset));
  return x;
}

// fp32 statistics [batch, Hq, rows, 1] over [T, Hq] rows.
fe::graph::Tensor_attributes stats_layout(const Shape& s) {
  const std::int64_t hq = s.dims.q_heads;
  return fe::graph::Tensor_attributes()
      .set_uid(stats_uid)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({s.batch, hq, s.max_q, 1})
      .set_stride({s.max_q * hq, 1, hq, 1});
}

std::shared_ptr<Graph> build_forward(const Shape& s, fe::error_t& error) {
  auto graph = new_graph();
  const Operands x = operands(*graph, s);
  auto attributes = fe::graph::SDPA_attributes()
                        .set_name("sdpa")
                        .set_generate_stats(true)
                        .set_attn_scale(s.dims.scale)
                        .set_padding_mask(true)
                        .set_seq_len_q(x.seq_q)
                        .set_seq_len_kv(x.seq_kv);
  set_mask(attributes, s);
  auto [o, stats] = graph->sdpa(x.q, x.k, x.v, attributes);
  set_thd(o, o_uid, s, s.dims.q_heads, s.max_q, s.dims.head_dim, x.q_offset);
  const auto layout = stats_layout(s);
  stats->set_output(true)
      .set_uid(stats_uid)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(layout.get_dim())
      .set_stride(layout.get_stride())
      .set_ragged_offset(x.stats_offset);
  error = graph->build(Library::get().handle(), {fe::HeurMode_t::A});
  return graph;
}

std::shared_ptr<Graph> build_backward(const Shape& s, fe::error_t& error) {
  auto graph = new_graph();
  const Operands x = operands(*graph, s);
  const std::int64_t hq = s.dims.q_heads, hkv = s.dims.kv_heads, d = s.dims.head_dim;
  auto o = graph->tensor(thd("o", o_uid, s, hq, s.max_q, d).set_ragged_offset(x.q_offset));
  auto dout = graph->tensor(thd("dout", dout_uid, s, hq, s.max_q, d).set_ragged_offset(x.q_offset));
  auto stats = graph->tensor(stats_layout(s).set_name("stats").set_ragged_offset(x.stats_offset));
  auto attributes = fe::graph::SDPA_backward_attributes()
                        .set_name("sdpa_backward")
                        .set_max_total_seq_len_q(s.total_q)
                        .set_max_total_seq_len_kv(s.total_kv)
                        .set_attn_scale(s.dims.scale)
                        .set_padding_mask(true)
                        .set_seq_len_q(x.seq_q)
                        .set_seq_len_kv(x.seq_kv);
  set_mask(attributes, s);
  auto [dq, dk, dv] = graph->sdpa_backward(x.q, x.k, x.v, o, dout, stats, attributes);
  set_thd(dq, dq_uid, s, hq, s.max_q, d, x.q_offset);
  set_thd(dk, dk_uid, s, hkv, s.max_kv, d, x.kv_offset);
  set_thd(dv, dv_uid, s, hkv, s.max_kv, d, x.kv_offset);
  error = graph->build(Library::get().handle(), {fe::HeurMode_t::A});
  return graph;
}

std::shared_ptr<Graph> graph_for(const Shape& s, bool backward) {
  Library& library = Library::get();
  std::lock_guard<std::mutex> lock(library.mutex);
  const std::string key = key_of(s, backward);
  if (const auto found = library.graphs.find(key); found != library.graphs.end()) {
    return found->second;
  }
  fe::error_t error;
  auto graph = backward ? build_backward(s, error) : build_forward(s, error);
  check(error, backward ? "building the backward graph" : "building the forward graph");
  library.graphs.emplace(key, graph);
  return graph;
}

Shape shape_of(const CudnnAttentionDims& dims, const CudnnAttentionCall& call) {
  return {dims,
          call.causal,
          call.left_bound,
          call.batch,
          call.max_q_rows,
          call.max_kv_rows,
          call.total_q_rows,
          call.total_kv_rows};
}

void run(const Graph& graph, std::unordered_map<std::int64_t, void*>& pack,
         const CudnnAttentionCall& call, cudaStream_t stream) {
  Library& library = Library::get();
  cudnnHandle_t handle = library.handle();
  if (cudnnSetStream(handle, stream) != CUDNN_STATUS_SUCCESS) {
    core::throw_runtime_error("cuDNN attention: cudnnSetStream failed");
  }
  pack[seq_q_uid] = const_cast<std::int32_t*>(call.q_rows);
  pack[seq_kv_uid] = const_cast<std::int32_t*>(call.kv_rows);
  pack[q_offset_uid] = const_cast<std::int32_t*>(call.q_offsets);
  pack[kv_offset_uid] = const_cast<std::int32_t*>(call.kv_offsets);
  pack[stats_offset_uid] = const_cast<std::int32_t*>(call.stats_offsets);
  std::int64_t bytes = 0;
  check(graph.get_workspace_size(bytes), "workspace size");
  void* workspace = bytes > 0 ? library.workspace(bytes) : nullptr;
  check(graph.execute(handle, pack, workspace), "execute");
}

}  // namespace

std::string cudnn_attention_library() {
  const std::size_t version = cudnnGetVersion();
  return "cuDNN " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
         "." + std::to_string(version % 100) + " (cudnn-frontend " +
         std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION) + ")";
}

std::string cudnn_attention_unsupported(const CudnnAttentionDims& dims, int sliding_window) {
  try {
    // The shapes a bin produces: causal blocks (the window as their left bound) and full
    // blocks below the queries (a window cut as a left bound too).
    for (const bool causal : {true, false}) {
      const Shape s{dims, causal, sliding_window, 2, 128, 256, 256, 512};
      for (const bool backward : {false, true}) {
        fe::error_t error;
        if (backward) {
          build_backward(s, error);
        } else {
          build_forward(s, error);
        }
        if (!error.is_good()) {
          return std::string(backward ? "backward" : "forward") + (causal ? " causal" : " full") +
                 " graph: " + message_of(error);
        }
      }
    }
  } catch (const std::exception& error) {
    return error.what();
  }
  return {};
}

void cudnn_attention_forward(const CudnnAttentionDims& dims, const CudnnAttentionCall& call,
                             const bf16* q, const bf16* k, const bf16* v, bf16* o, float* stats,
                             cudaStream_t stream) {
  const auto graph = graph_for(shape_of(dims, call), false);
  std::unordered_map<std::int64_t, void*> pack{{q_uid, const_cast<bf16*>(q)},
                                               {k_uid, const_cast<bf16*>(k)},
                                               {v_uid, const_cast<bf16*>(v)},
                                               {o_uid, o},
                                               {stats_uid, stats}};
  run(*graph, pack, call, stream);
}

void cudnn_attention_backward(const CudnnAttentionDims& dims, const CudnnAttentionCall& call,
                              const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                              const bf16* dout, const float* stats, bf16* dq, bf16* dk, bf16* dv,
                              cudaStream_t stream) {
  const auto graph = graph_for(shape_of(dims, call), true);
  std::unordered_map<std::int64_t, void*> pack{{q_uid, const_cast<bf16*>(q)},
                                               {k_uid, const_cast<bf16*>(k)},
                                               {v_uid, const_cast<bf16*>(v)},
                                               {o_uid, const_cast<bf16*>(o)},
                                               {dout_uid, const_cast<bf16*>(dout)},
                                               {stats_uid, const_cast<float*>(stats)},
                                               {dq_uid, dq},
                                               {dk_uid, dk},
                                               {dv_uid, dv}};
  run(*graph, pack, call, stream);
}

}  // namespace dyncp::kernels
