// bench_cpu_ops: the training step's non-GEMM ops on the CPU (LayerNorm, RMSNorm, GELU, SwiGLU,
// RoPE, cross-entropy, token and position embeddings, attention), forward and backward, at the
// demo model's shapes (configs/demo_gpt.yaml: d 160, 4 heads, seq 64, micro-batch 8, vocab 256)
// and GPT-2 small's (d 768, 12 heads, seq 256, micro-batch 2, vocab 50257), each through both
// paths of kernels/cpu/ops_path.h in one run on the same buffers:
//   fixed   the compiler-vectorised loops (device.cpu_gemm deterministic; attention through
//           GemmFixed and a [seq, seq] block per head): the baseline of the speedup;
//   vector  the AVX-512 / AVX2 kernels (device.cpu_gemm blas), ISA as CPUID, SLUICE_ISA or --isa
//           select.
// Each is set against the same run's memory speed: an OpenMP memcpy, on the ops' team, moving
// the op's compulsory bytes (inputs read once, outputs written once: half of them copied, so the
// copy's reads plus writes equal them). "x mem" is the op's median time over that copy's: 1.0 is
// memory speed. Attention is compute-bound, so its rows also give GFLOP/s (causal: 2 * S^2 / 2 *
// head_dim multiply-adds per head forward, 5 / 2 of that backward).
//
// Every repeat times memcpy, fixed and vector back to back (a sample repeats the call for at
// least --min-sample-seconds); the figures are medians over --repeats, the speedup the median of
// per-repeat fixed / vector ratios. Before timing, each op's vector outputs are checked against
// its fixed outputs (max |vector - fixed| / max |fixed| <= 2e-5; tests/ops holds both to the
// fp64 reference).
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/lib/bench_record.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops_activation.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_loss.h"
#include "kernels/cpu/ops_norm.h"
#include "kernels/cpu/ops_path.h"
#include "kernels/cpu/ops_rope.h"

namespace {

namespace kc = sluice::kernels::cpu;
using sluice::bench::ElapsedSeconds;
using sluice::bench::Median;
using sluice::bench::MedianRatio;

constexpr double kCheckTol = 2e-5;

struct Shape {
  std::string name;
  int64_t batch, seq, d, heads, vocab;
  int64_t Tokens() const { return batch * seq; }
};

struct Options {
  std::vector<std::string> shapes = {"demo", "gpt2"};
  std::vector<std::string> ops;  // empty: all
  int repeats = 7;
  double min_sample_seconds = 0.005;
  std::string isa;
  std::string json_path;
};

std::vector<float> Random(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// One op: its compulsory bytes, the call, and the outputs to compare between paths.
struct OpCase {
  std::string op, pass;
  double bytes = 0;
  double flops = 0;  // 0: not reported
  std::function<void()> run;
  std::vector<const std::vector<float>*> outputs;
};

// The buffers of one shape, shared by its cases.
struct Buffers {
  std::vector<float> x, y, dy, dx, gamma, beta, dgamma, dbeta, mean, rstd;
  std::vector<float> h, hy, hdy, hdx, up, dup;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv, ws, rope;
  std::vector<float> logits, dlogits, ce_lse, table, dtable, wpe, dwpe;
  std::vector<int32_t> targets, tokens;
};

std::vector<OpCase> MakeCases(const Shape& s, Buffers& b) {
  const int64_t t = s.Tokens(), d = s.d, hidden = 4 * s.d, hd = s.d / s.heads;
  const double n = static_cast<double>(t * d), nh = static_cast<double>(t * hidden);
  const double nv = static_cast<double>(t * s.vocab);
  b.x = Random(t * d, -3, 3, 1);
  b.dy = Random(t * d, -1, 1, 2);
  b.y.assign(t * d, 0);
  b.dx.assign(t * d, 0);
  b.gamma = Random(d, 0.5, 1.5, 3);
  b.beta = Random(d, -1, 1, 4);
  b.dgamma.assign(d, 0);
  b.dbeta.assign(d, 0);
  b.mean.assign(t, 0);
  b.rstd.assign(t, 0);
  b.h = Random(t * hidden, -6, 6, 5);
  b.up = Random(t * hidden, -2, 2, 6);
  b.hdy = Random(t * hidden, -1, 1, 7);
  b.hy.assign(t * hidden, 0);
  b.hdx.assign(t * hidden, 0);
  b.dup.assign(t * hidden, 0);
  b.q = Random(t * d, -2, 2, 8);
  b.k = Random(t * d, -2, 2, 9);
  b.v = Random(t * d, -1, 1, 10);
  b.dout = Random(t * d, -1, 1, 11);
  b.out.assign(t * d, 0);
  b.lse.assign(s.batch * s.heads * s.seq, 0);
  b.dq.assign(t * d, 0);
  b.dk.assign(t * d, 0);
  b.dv.assign(t * d, 0);
  const sluice::kernels::AttentionDims dims{
      .batch = s.batch, .seq = s.seq, .q_heads = s.heads, .kv_heads = s.heads, .head_dim = hd};
  b.ws.assign(sluice::kernels::AttentionWorkspaceElements(dims), 0);
  b.rope.assign(t * d, 0);
  b.logits = Random(t * s.vocab, -6, 6, 12);
  b.dlogits.assign(t * s.vocab, 0);
  b.ce_lse.assign(t, 0);
  b.targets.resize(t);
  b.tokens.resize(t);
  for (int64_t i = 0; i < t; ++i) {
    b.targets[i] = static_cast<int32_t>((i * 7919) % s.vocab);
    b.tokens[i] = static_cast<int32_t>((i * 104729) % s.vocab);
  }
  b.table = Random(s.vocab * d, -1, 1, 13);
  b.dtable.assign(s.vocab * d, 0);
  b.wpe = Random(s.seq * d, -1, 1, 14);
  b.dwpe.assign(s.seq * d, 0);
  const double attn_fwd_flops = 2.0 * s.batch * s.heads * s.seq * s.seq * hd;

  std::vector<OpCase> cases;
  cases.push_back({"layernorm",
                   "fwd",
                   8 * n,
                   0,
                   [&b, t, d] {
                     kc::LayerNormForward(b.x.data(), b.gamma.data(), b.beta.data(), b.y.data(),
                                          b.mean.data(), b.rstd.data(), t, d, 1e-5f);
                   },
                   {&b.y, &b.rstd}});
  cases.push_back({"layernorm",
                   "bwd",
                   12 * n,
                   0,
                   [&b, t, d] {
                     kc::LayerNormBackward(b.x.data(), b.gamma.data(), b.mean.data(), b.rstd.data(),
                                           b.dy.data(), b.dx.data(), b.dgamma.data(),
                                           b.dbeta.data(), t, d);
                   },
                   {&b.dx}});
  cases.push_back({"rmsnorm",
                   "fwd",
                   8 * n,
                   0,
                   [&b, t, d] {
                     kc::RmsNormForward(b.x.data(), b.gamma.data(), b.y.data(), b.rstd.data(), t, d,
                                        1e-5f);
                   },
                   {&b.y}});
  cases.push_back({"rmsnorm",
                   "bwd",
                   12 * n,
                   0,
                   [&b, t, d] {
                     kc::RmsNormBackward(b.x.data(), b.gamma.data(), b.rstd.data(), b.dy.data(),
                                         b.dx.data(), b.dgamma.data(), t, d);
                   },
                   {&b.dx}});
  const int64_t m = t * hidden;
  cases.push_back({"gelu",
                   "fwd",
                   8 * nh,
                   0,
                   [&b, m] { kc::GeluForward(b.h.data(), b.hy.data(), m); },
                   {&b.hy}});
  cases.push_back({"gelu",
                   "bwd",
                   12 * nh,
                   0,
                   [&b, m] { kc::GeluBackward(b.h.data(), b.hdy.data(), b.hdx.data(), m); },
                   {&b.hdx}});
  cases.push_back({"swiglu",
                   "fwd",
                   12 * nh,
                   0,
                   [&b, m] { kc::SwiGluForward(b.h.data(), b.up.data(), b.hy.data(), m); },
                   {&b.hy}});
  cases.push_back({"swiglu",
                   "bwd",
                   20 * nh,
                   0,
                   [&b, m] {
                     kc::SwiGluBackward(b.h.data(), b.up.data(), b.hdy.data(), b.hdx.data(),
                                        b.dup.data(), m);
                   },
                   {&b.hdx, &b.dup}});
  cases.push_back({"rope",
                   "fwd",
                   8 * n,
                   0,
                   [&b, s, hd] {
                     kc::RopeForward(b.q.data(), b.rope.data(), s.batch, s.seq, s.heads, hd,
                                     10000.0f);
                   },
                   {&b.rope}});
  cases.push_back({"rope",
                   "bwd",
                   8 * n,
                   0,
                   [&b, s, hd] {
                     kc::RopeBackward(b.dout.data(), b.rope.data(), s.batch, s.seq, s.heads, hd,
                                      10000.0f);
                   },
                   {&b.rope}});
  cases.push_back({"cross_entropy",
                   "fwd",
                   4 * nv,
                   0,
                   [&b, t, s] {
                     kc::CrossEntropyForward(b.logits.data(), b.targets.data(), b.ce_lse.data(), t,
                                             s.vocab);
                   },
                   {&b.ce_lse}});
  cases.push_back({"cross_entropy",
                   "bwd",
                   8 * nv,
                   0,
                   [&b, t, s] {
                     kc::CrossEntropyBackward(b.logits.data(), b.targets.data(), b.ce_lse.data(),
                                              1.0f, b.dlogits.data(), t, s.vocab);
                   },
                   {&b.dlogits}});
  cases.push_back({"embedding",
                   "fwd",
                   8 * n,
                   0,
                   [&b, t, s, d] {
                     kc::EmbeddingForward(b.tokens.data(), b.table.data(), b.y.data(), t, s.vocab,
                                          d);
                   },
                   {&b.y}});
  cases.push_back({"embedding",
                   "bwd",
                   12 * n,
                   0,
                   [&b, t, s, d] {
                     kc::EmbeddingBackward(b.tokens.data(), b.dy.data(), b.dtable.data(), t,
                                           s.vocab, d);
                   },
                   {}});
  cases.push_back({"position_emb",
                   "fwd",
                   8 * n,
                   0,
                   [&b, s, d] {
                     kc::PositionEmbeddingForward(b.wpe.data(), b.y.data(), s.batch, s.seq, s.seq,
                                                  d);
                   },
                   {}});
  cases.push_back({"position_emb",
                   "bwd",
                   4 * n,
                   0,
                   [&b, s, d] {
                     kc::PositionEmbeddingBackward(b.dy.data(), b.dwpe.data(), s.batch, s.seq,
                                                   s.seq, d);
                   },
                   {}});
  cases.push_back({"attention",
                   "fwd",
                   16 * n,
                   attn_fwd_flops,
                   [&b, dims] {
                     kc::AttentionForward(b.q.data(), b.k.data(), b.v.data(), b.out.data(),
                                          b.lse.data(), dims, b.ws.data());
                   },
                   {&b.out, &b.lse}});
  cases.push_back({"attention",
                   "bwd",
                   32 * n,
                   2.5 * attn_fwd_flops,
                   [&b, dims] {
                     kc::AttentionBackward(b.q.data(), b.k.data(), b.v.data(), b.out.data(),
                                           b.lse.data(), b.dout.data(), b.dq.data(), b.dk.data(),
                                           b.dv.data(), dims, b.ws.data());
                   },
                   {&b.dq, &b.dk, &b.dv}});
  return cases;
}

void SetPath(kc::OpsPath path) {
  kc::SetOpsPath(path);
  // The fixed path's attention runs its products through the deterministic GEMM, as in training.
  kc::SetGemmBackend(kc::GemmBackend::kDeterministic);
}

// Seconds per call: the call repeated `calls` times.
double Sample(const std::function<void()>& fn, int calls) {
  return ElapsedSeconds([&] {
           for (int i = 0; i < calls; ++i) fn();
         }) /
         calls;
}

int CallsFor(const std::function<void()>& fn, double min_seconds) {
  const double once = std::max(Sample(fn, 1), 1e-7);
  return std::max(1, static_cast<int>(std::ceil(min_seconds / once)));
}

// max |a - b| / max |b| over the outputs.
double MaxRelDiff(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < a[i].size(); ++j) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[i][j]) - b[i][j]));
      scale = std::max(scale, std::fabs(static_cast<double>(b[i][j])));
    }
  }
  return scale > 0 ? diff / scale : diff;
}

std::vector<std::vector<float>> Snapshot(const OpCase& c) {
  std::vector<std::vector<float>> out;
  for (const auto* o : c.outputs) out.push_back(*o);
  return out;
}

int Run(const Options& options) {
  if (!options.isa.empty()) {
    auto isa = sluice::bench::ParseIsaOption(options.isa);
    if (!isa.ok()) {
      std::fprintf(stderr, "error: %s\n", isa.status().ToString().c_str());
      return 1;
    }
    sluice::kernels::ForceIsa(*isa);
  }
  const std::vector<Shape> all = {{"demo", 8, 64, 160, 4, 256}, {"gpt2", 2, 256, 768, 12, 50257}};
  const int threads = omp_get_max_threads();
  const std::string vector_name = kc::OpsPathName(kc::OpsPath::kVector);
  nlohmann::json records = nlohmann::json::array();
  std::string table =
      "bench_cpu_ops: fixed = compiler loops (deterministic), vector = " + vector_name + "; " +
      std::to_string(threads) + " threads; x mem = time / same-run memcpy of the op's bytes\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-5s %-13s %-4s %9s %9s %9s %9s %7s %7s %8s %9s %9s\n",
                "shape", "op", "pass", "MB", "memcpy us", "fixed us", "vector us", "fix xm",
                "vec xm", "speedup", "vec GF/s", "check");
  table += line;
  bool all_passed = true;
  std::vector<char> src, dst;
  for (const Shape& shape : all) {
    if (std::find(options.shapes.begin(), options.shapes.end(), shape.name) ==
        options.shapes.end()) {
      continue;
    }
    Buffers buffers;
    std::vector<OpCase> cases = MakeCases(shape, buffers);
    for (const OpCase& c : cases) {
      if (!options.ops.empty() &&
          std::find(options.ops.begin(), options.ops.end(), c.op) == options.ops.end()) {
        continue;
      }
      // The check: one call per path from the same inputs.
      SetPath(kc::OpsPath::kFixed);
      c.run();
      const auto fixed_out = Snapshot(c);
      SetPath(kc::OpsPath::kVector);
      c.run();
      const double rel = MaxRelDiff(Snapshot(c), fixed_out);
      const bool passed = rel <= kCheckTol;
      all_passed = all_passed && passed;

      const size_t half = static_cast<size_t>(c.bytes / 2);
      src.assign(half, 1);
      dst.assign(half, 0);
      const std::function<void()> copy = [&] {
#pragma omp parallel num_threads(threads)
        {
          const size_t per = (half + threads - 1) / threads;
          const size_t begin = std::min(half, per * omp_get_thread_num());
          const size_t end = std::min(half, begin + per);
          if (begin < end) std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
        }
      };
      SetPath(kc::OpsPath::kFixed);
      const int fixed_calls = CallsFor(c.run, options.min_sample_seconds);
      SetPath(kc::OpsPath::kVector);
      const int vector_calls = CallsFor(c.run, options.min_sample_seconds);
      const int copy_calls = CallsFor(copy, options.min_sample_seconds);
      std::vector<double> t_copy, t_fixed, t_vector;
      for (int r = 0; r < options.repeats; ++r) {
        t_copy.push_back(Sample(copy, copy_calls));
        SetPath(kc::OpsPath::kFixed);
        t_fixed.push_back(Sample(c.run, fixed_calls));
        SetPath(kc::OpsPath::kVector);
        t_vector.push_back(Sample(c.run, vector_calls));
      }
      const double m_copy = Median(t_copy), m_fixed = Median(t_fixed), m_vector = Median(t_vector);
      const double speedup = MedianRatio(t_fixed, t_vector);
      const double fixed_xm = MedianRatio(t_fixed, t_copy);
      const double vector_xm = MedianRatio(t_vector, t_copy);
      const double gflops = c.flops > 0 ? c.flops / m_vector / 1e9 : 0;
      std::snprintf(line, sizeof(line),
                    "%-5s %-13s %-4s %9.3f %9.1f %9.1f %9.1f %7.2f %7.2f %7.2fx %9s %9s\n",
                    shape.name.c_str(), c.op.c_str(), c.pass.c_str(), c.bytes / 1e6, m_copy * 1e6,
                    m_fixed * 1e6, m_vector * 1e6, fixed_xm, vector_xm, speedup,
                    gflops > 0 ? std::to_string(static_cast<int>(gflops)).c_str() : "-",
                    c.outputs.empty() ? "same op" : (passed ? "ok" : "FAILED"));
      table += line;
      records.push_back(
          {{"shape", shape.name},
           {"op", c.op},
           {"pass", c.pass},
           {"bytes", c.bytes},
           {"flops", c.flops},
           {"memcpy_median_s", m_copy},
           {"fixed_median_s", m_fixed},
           {"vector_median_s", m_vector},
           {"fixed_over_memcpy", fixed_xm},
           {"vector_over_memcpy", vector_xm},
           {"speedup_vector_over_fixed", speedup},
           {"vector_gflops", gflops},
           {"samples_s", {{"memcpy", t_copy}, {"fixed", t_fixed}, {"vector", t_vector}}},
           {"max_rel_diff_vector_vs_fixed", rel},
           {"check_tolerance", kCheckTol},
           {"check_passed", passed}});
    }
  }
  SetPath(kc::OpsPath::kFixed);
  table +=
      "ops not on the vector path (rope, embeddings) run the same code on both: their columns "
      "measure noise.\n";
  nlohmann::json record = {
      {"benchmark", "bench_cpu_ops"},
      {"date", sluice::bench::UtcTimestamp()},
      {"machine", sluice::bench::MachineJson()},
      {"settings",
       {{"threads", threads},
        {"repeats", options.repeats},
        {"min_sample_seconds", options.min_sample_seconds},
        {"fixed_path", kc::OpsPathName(kc::OpsPath::kFixed)},
        {"vector_path", vector_name},
        {"fixed_attention_gemm", kc::GemmKernelName(kc::GemmBackend::kDeterministic)},
        {"shapes", options.shapes}}},
      {"rows", records}};
  sluice::Status status = sluice::bench::PrintTableAndWriteRecord(table, record, options.json_path);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  }
  if (!all_passed) {
    std::fprintf(stderr, "error: a vector op differs from its fixed path beyond %g\n", kCheckTol);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("CPU non-GEMM ops: fixed vs vector path against same-run memcpy", "bench_cpu_ops");
  Options options;
  app.add_option("--shapes", options.shapes, "demo, gpt2");
  app.add_option("--ops", options.ops,
                 "layernorm, rmsnorm, gelu, swiglu, rope, cross_entropy, "
                 "embedding, position_emb, attention (default: all)");
  app.add_option("--repeats", options.repeats, "timed samples per figure")
      ->check(CLI::PositiveNumber);
  app.add_option("--min-sample-seconds", options.min_sample_seconds,
                 "a sample repeats the call until it lasts about this long");
  app.add_option("--isa", options.isa, "cap the vector path's ISA: avx2 or avx512");
  app.add_option("--json", options.json_path, "write the JSON record here ('-': stdout)");
  CLI11_PARSE(app, argc, argv);
  return Run(options);
}
