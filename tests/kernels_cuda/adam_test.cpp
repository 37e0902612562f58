// CUDA Adam / AdamW against kernels::AdamStepReference, bit for bit: every gradient type x copy
// type x Adam/AdamW x bias correction on/off, sizes with and without a vector tail, aligned and
// misaligned pointers (the vector and the element-wise kernel), three consecutive steps with
// grad_scale != 1 and weight decay != 0. Tolerance: none (bitwise), except that a NaN only has to
// be a NaN (the GPU makes NaN payloads canonical, x86 keeps them).
#include "kernels/cuda/adam.h"

#include <cuda_runtime.h>  // cudaMalloc(T**), which DeviceArray calls
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/ref/adam_ref.h"
#include "kernels/ref/half.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sluice::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::Rng;
using testing::TestStream;

constexpr uint8_t kSentinelByte = 0xa5;  // 0xa5a5a5a5 / 0xa5a5: what the kernel must not touch
constexpr size_t kGuard = 2;             // elements allocated past the end

bool SameOrBothNan(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}
bool SameOrBothNan16(uint16_t a, uint16_t b, AdamCopyType type) {
  const float fa = type == AdamCopyType::kF16 ? F16ToF32(a) : Bf16ToF32(a);
  const float fb = type == AdamCopyType::kF16 ? F16ToF32(b) : Bf16ToF32(b);
  if (std::isnan(fa) || std::isnan(fb)) return std::isnan(fa) && std::isnan(fb);
  return a == b;
}

// Compares device elements [offset, offset + n) with `want`, and checks that the guard elements
// around them still hold the sentinel.
void ExpectF32(const std::vector<float>& device, size_t offset, const std::vector<float>& want,
               const std::string& what) {
  int failures = 0;
  for (size_t i = 0; i < want.size() && failures < 5; ++i) {
    const float got = device[offset + i];
    if (!SameOrBothNan(got, want[i])) {
      ++failures;
      ADD_FAILURE() << what << "[" << i << "]: got " << got << " (0x" << std::hex
                    << std::bit_cast<uint32_t>(got) << "), want " << want[i] << " (0x"
                    << std::bit_cast<uint32_t>(want[i]) << ")" << std::dec;
    }
  }
  const uint32_t sentinel = 0xa5a5a5a5u;
  for (size_t i = 0; i < device.size(); ++i) {
    if (i >= offset && i < offset + want.size()) continue;
    EXPECT_EQ(std::bit_cast<uint32_t>(device[i]), sentinel)
        << what << ": guard element " << i << " was written";
  }
}

void ExpectU16(const std::vector<uint16_t>& device, size_t offset,
               const std::vector<uint16_t>& want, AdamCopyType type, const std::string& what) {
  int failures = 0;
  for (size_t i = 0; i < want.size() && failures < 5; ++i) {
    const uint16_t got = device[offset + i];
    if (!SameOrBothNan16(got, want[i], type)) {
      ++failures;
      ADD_FAILURE() << what << "[" << i << "]: got 0x" << std::hex << got << ", want 0x" << want[i]
                    << std::dec;
    }
  }
  for (size_t i = 0; i < device.size(); ++i) {
    if (i >= offset && i < offset + want.size()) continue;
    EXPECT_EQ(device[i], 0xa5a5u) << what << ": guard element " << i << " was written";
  }
}

// Host state (run through the reference) and device state (run through the kernel) of one
// optimizer, the device arrays `offset` elements into their allocation.
class AdamCase {
 public:
  AdamCase(size_t n, size_t offset, AdamGradType grad_type, AdamCopyType copy_type)
      : n_(n),
        offset_(offset),
        grad_type_(grad_type),
        copy_type_(copy_type),
        p_(n),
        m_(n, 0.0f),
        v_(n, 0.0f),
        g32_(n),
        g16_(n),
        copy_(n, 0),
        dp_(n + offset + kGuard),
        dm_(n + offset + kGuard),
        dv_(n + offset + kGuard),
        dg32_(n + offset + kGuard),
        dg16_(n + offset + kGuard),
        dcopy_(n + offset + kGuard) {
    Rng rng(1000 + n + offset);
    p_ = rng.Uniform<float>(static_cast<int64_t>(n));
    for (DeviceArray<float>* a : {&dp_, &dm_, &dv_, &dg32_}) a->Fill(kSentinelByte);
    for (DeviceArray<uint16_t>* a : {&dg16_, &dcopy_}) a->Fill(kSentinelByte);
    Upload(dp_, p_);
    Upload(dm_, m_);
    Upload(dv_, v_);
  }

  // New gradients for this step: mostly small, a few large, some tiny enough that g * g and the
  // second moment are subnormal, some exact zeros.
  void SetGrads(uint64_t seed) {
    Rng rng(seed);
    const std::vector<float> u = rng.Uniform<float>(static_cast<int64_t>(n_));
    for (size_t i = 0; i < n_; ++i) {
      float g = 4.0f * u[i] * u[i] * u[i];
      if (i % 97 == 3) g = 1e-20f * (u[i] < 0 ? -1.0f : 1.0f);
      if (i % 101 == 5) g = 0.0f;
      switch (grad_type_) {
        case AdamGradType::kF32:
          g32_[i] = g;
          break;
        case AdamGradType::kBF16:
          g16_[i] = F32ToBf16(g);
          break;
        case AdamGradType::kF16:
          g16_[i] = F32ToF16(g);
          break;
      }
    }
    if (grad_type_ == AdamGradType::kF32) {
      Upload(dg32_, g32_);
    } else {
      Upload(dg16_, g16_);
    }
  }

  AdamTensors HostTensors() {
    return AdamTensors{p_.data(),
                       m_.data(),
                       v_.data(),
                       grad_type_ == AdamGradType::kF32 ? static_cast<const void*>(g32_.data())
                                                        : static_cast<const void*>(g16_.data()),
                       grad_type_,
                       copy_type_ == AdamCopyType::kNone ? nullptr : copy_.data(),
                       copy_type_,
                       n_};
  }
  AdamTensors DeviceTensors() {
    const void* grads = grad_type_ == AdamGradType::kF32
                            ? static_cast<const void*>(dg32_.data() + offset_)
                            : static_cast<const void*>(dg16_.data() + offset_);
    void* copy = copy_type_ == AdamCopyType::kNone ? nullptr : dcopy_.data() + offset_;
    return AdamTensors{dp_.data() + offset_, dm_.data() + offset_,
                       dv_.data() + offset_, grads,
                       grad_type_,           copy,
                       copy_type_,           n_};
  }

  void ExpectDeviceMatchesHost(const std::string& what) {
    ExpectF32(dp_.Download(), offset_, p_, what + " params");
    ExpectF32(dm_.Download(), offset_, m_, what + " exp_avg");
    ExpectF32(dv_.Download(), offset_, v_, what + " exp_avg_sq");
    if (copy_type_ != AdamCopyType::kNone) {
      ExpectU16(dcopy_.Download(), offset_, copy_, copy_type_, what + " param_copy");
    }
  }

  std::vector<float>& host_params() { return p_; }
  std::vector<float>& host_grads_f32() { return g32_; }
  DeviceArray<float>& device_params() { return dp_; }
  DeviceArray<float>& device_grads_f32() { return dg32_; }
  DeviceArray<uint16_t>& device_copy() { return dcopy_; }
  size_t offset() const { return offset_; }

  // Writes `host` into the device array at the case's offset, leaving the guards alone.
  template <typename T>
  void Upload(DeviceArray<T>& device, const std::vector<T>& host) {
    ASSERT_EQ(cudaMemcpy(device.data() + offset_, host.data(), host.size() * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    // The kernels run on a non-blocking stream, which does not wait for a pageable upload's DMA.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

 private:
  size_t n_;
  size_t offset_;
  AdamGradType grad_type_;
  AdamCopyType copy_type_;
  std::vector<float> p_, m_, v_, g32_;
  std::vector<uint16_t> g16_, copy_;
  DeviceArray<float> dp_, dm_, dv_, dg32_;
  DeviceArray<uint16_t> dg16_, dcopy_;
};

using Types = std::tuple<AdamGradType, AdamCopyType>;

class CudaAdamVsReference : public ::testing::TestWithParam<Types> {};

TEST_P(CudaAdamVsReference, ThreeStepsBitwiseEqual) {
  SLUICE_SKIP_WITHOUT_GPU();
  const auto [grad_type, copy_type] = GetParam();
  TestStream stream;
  const float grad_scales[] = {0.5f, 0.37f, 1.25f};
  const float lrs[] = {1e-3f, 3e-4f, 2e-3f};
  // 7, 1000 and 2^20 + 3 leave a tail after the groups of four; offset 1 misaligns every pointer.
  const std::vector<std::pair<size_t, size_t>> shapes = {
      {1, 0}, {7, 0}, {1000, 0}, {(1u << 20) + 3, 0}, {1, 1}, {7, 1}, {1000, 1}};
  for (bool adamw : {true, false}) {
    for (bool bias_correction : {true, false}) {
      for (auto [n, offset] : shapes) {
        std::ostringstream what;
        what << AdamGradTypeName(grad_type) << "/" << AdamCopyTypeName(copy_type)
             << (adamw ? " adamw" : " adam") << (bias_correction ? " bc" : " no-bc") << " n=" << n
             << " offset=" << offset;
        SCOPED_TRACE(what.str());
        AdamCase c(n, offset, grad_type, copy_type);
        for (int step = 1; step <= 3; ++step) {
          c.SetGrads(77 * step + n);
          const AdamHyperparams hyper{.lr = lrs[step - 1],
                                      .beta1 = 0.9f,
                                      .beta2 = 0.95f,
                                      .eps = 1e-8f,
                                      .weight_decay = 0.1f,
                                      .adamw_mode = adamw,
                                      .bias_correction = bias_correction,
                                      .step = step};
          SLUICE_EXPECT_LAUNCH_OK(
              AdamStep(c.DeviceTensors(), hyper, grad_scales[step - 1], stream.get()));
          AdamStepReference(c.HostTensors(), hyper, grad_scales[step - 1]);
          c.ExpectDeviceMatchesHost(what.str() + " step " + std::to_string(step));
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

std::string TypesName(const ::testing::TestParamInfo<Types>& info) {
  return std::string(AdamGradTypeName(std::get<0>(info.param))) + "_grads_" +
         AdamCopyTypeName(std::get<1>(info.param)) + "_copy";
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, CudaAdamVsReference,
    ::testing::Combine(
        ::testing::Values(AdamGradType::kF32, AdamGradType::kBF16, AdamGradType::kF16),
        ::testing::Values(AdamCopyType::kNone, AdamCopyType::kBF16, AdamCopyType::kF16)),
    TypesName);

// NaN, infinities, subnormals, ties, f16 overflow and random bit patterns as parameters, with
// lr = 0 so the parameters keep their values and the copy shows the conversion alone; then the
// same patterns as gradients with a real step (inf / NaN / huge gradients through every operation).
TEST(CudaAdam, SpecialValuesMatchReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
      0xff812345u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x7f7fffffu, 0x3f808000u, 0x3f818000u,
      0x3f80c000u, 0xbf808000u, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x38800000u, 0x387fc000u,
      0x33800000u, 0x33000000u, 0x33000001u, 0x7f7f8000u, 0x3f7fffffu, 0x4b800000u, 0x3c003000u,
      0x3c002000u, 0x3c001000u, 0x38801000u, 0x38802000u, 0x38803000u, 0xb8801000u, 0x33c00000u};
  std::mt19937 rng(7);
  while (bits.size() < 1003) bits.push_back(static_cast<uint32_t>(rng()));
  const size_t n = bits.size();
  std::vector<float> specials(n);
  for (size_t i = 0; i < n; ++i) specials[i] = std::bit_cast<float>(bits[i]);

  for (AdamCopyType copy_type : {AdamCopyType::kBF16, AdamCopyType::kF16}) {
    SCOPED_TRACE(AdamCopyTypeName(copy_type));
    AdamCase c(n, 0, AdamGradType::kF32, copy_type);
    c.host_params() = specials;
    c.Upload(c.device_params(), specials);
    std::vector<float>& g = c.host_grads_f32();
    std::fill(g.begin(), g.end(), 0.25f);
    c.Upload(c.device_grads_f32(), g);
    const AdamHyperparams hyper{.lr = 0.0f};
    SLUICE_EXPECT_LAUNCH_OK(AdamStep(c.DeviceTensors(), hyper, 1.0f, stream.get()));
    AdamStepReference(c.HostTensors(), hyper, 1.0f);
    c.ExpectDeviceMatchesHost("lr = 0");
    // The copy of every parameter, NaNs included, is the reference rounding of what the GPU holds.
    const std::vector<float> p = c.device_params().Download();
    const std::vector<uint16_t> copy = c.device_copy().Download();
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want = copy_type == AdamCopyType::kF16 ? F32ToF16(p[i]) : F32ToBf16(p[i]);
      ASSERT_EQ(copy[i], want) << "element " << i << " bits 0x" << std::hex
                               << std::bit_cast<uint32_t>(p[i]);
    }
  }

  for (bool adamw : {true, false}) {
    SCOPED_TRACE(adamw ? "adamw" : "adam");
    AdamCase c(n, 0, AdamGradType::kF32, AdamCopyType::kBF16);
    c.host_grads_f32() = specials;
    c.Upload(c.device_grads_f32(), specials);
    const AdamHyperparams hyper{.lr = 1e-2f, .weight_decay = 0.5f, .adamw_mode = adamw, .step = 2};
    SLUICE_EXPECT_LAUNCH_OK(AdamStep(c.DeviceTensors(), hyper, 3.0f, stream.get()));
    AdamStepReference(c.HostTensors(), hyper, 3.0f);
    c.ExpectDeviceMatchesHost("special gradients");
  }
}

TEST(CudaAdam, DeviceScaleEqualsHostScale) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  const size_t n = 4099;
  const float scale = 0.123f;
  DeviceArray<float> device_scale(std::vector<float>{scale});
  AdamCase host_scale(n, 0, AdamGradType::kBF16, AdamCopyType::kBF16);
  AdamCase on_device(n, 0, AdamGradType::kBF16, AdamCopyType::kBF16);
  for (int step = 1; step <= 2; ++step) {
    host_scale.SetGrads(step);
    on_device.SetGrads(step);
    const AdamHyperparams hyper{.lr = 1e-3f, .weight_decay = 0.01f, .step = step};
    SLUICE_EXPECT_LAUNCH_OK(AdamStep(host_scale.DeviceTensors(), hyper, scale, stream.get()));
    SLUICE_EXPECT_LAUNCH_OK(
        AdamStepDeviceScale(on_device.DeviceTensors(), hyper, device_scale.data(), stream.get()));
    AdamStepReference(on_device.HostTensors(), hyper, scale);
  }
  on_device.ExpectDeviceMatchesHost("device scale");
  EXPECT_EQ(host_scale.device_params().Download(), on_device.device_params().Download());
}

TEST(CudaAdam, InvalidArgumentsAreRejectedBeforeLaunch) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  DeviceArray<float> p(8), m(8), v(8), g(8);
  DeviceArray<uint16_t> copy(8);
  const AdamTensors good{
      p.data(), m.data(), v.data(), g.data(), AdamGradType::kF32, nullptr, AdamCopyType::kNone, 8};
  SLUICE_EXPECT_LAUNCH_OK(AdamStep(good, AdamHyperparams{}, 1.0f, stream.get()));

  auto expect_invalid = [&](const AdamTensors& t, const AdamHyperparams& h, const char* what) {
    const LaunchStatus status = AdamStep(t, h, 1.0f, stream.get());
    EXPECT_EQ(status.code(), LaunchStatus::Code::kInvalidArgument)
        << what << ": " << status.ToString();
  };
  AdamTensors null_params = good;
  null_params.params = nullptr;
  expect_invalid(null_params, AdamHyperparams{}, "null params");
  AdamTensors copy_without_buffer = good;
  copy_without_buffer.copy_type = AdamCopyType::kBF16;
  expect_invalid(copy_without_buffer, AdamHyperparams{}, "copy type without a buffer");
  AdamTensors misaligned = good;
  misaligned.exp_avg = reinterpret_cast<float*>(reinterpret_cast<char*>(m.data()) + 2);
  expect_invalid(misaligned, AdamHyperparams{}, "misaligned exp_avg");
  expect_invalid(good, AdamHyperparams{.beta2 = 1.0f}, "beta2 = 1");
  expect_invalid(good, AdamHyperparams{.step = 0}, "step 0");

  const LaunchStatus null_scale =
      AdamStepDeviceScale(good, AdamHyperparams{}, nullptr, stream.get());
  EXPECT_EQ(null_scale.code(), LaunchStatus::Code::kInvalidArgument) << null_scale.ToString();

  const AdamTensors empty{};
  SLUICE_EXPECT_LAUNCH_OK(AdamStep(empty, AdamHyperparams{}, 1.0f, stream.get()));
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
}

}  // namespace
}  // namespace sluice::kernels::cuda
