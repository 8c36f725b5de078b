// Every device kernel body against the CPU references, run on the CPU by HostExec (the checks are
// in device_kernels_check.h; cuda_backend_test.cu runs the same checks on a GPU).
#include <gtest/gtest.h>

#include "backends/cuda/device_kernels_check.h"
#include "backends/cuda/device_kernels_check_stored.h"
#include "backends/cuda/host_exec.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;

TEST(DeviceKernelsHost, Gemm) {
  HostExec ex;
  kc::check_gemm(ex);
}
// FP8 / FP4 weights as stored (device_kernels_check_stored.h): the bodies give the widened bits.
TEST(DeviceKernelsHost, StoredWeightGemm) {
  HostExec ex;
  kc::check_stored_gemm(ex, true);
}
TEST(DeviceKernelsHost, StoredWeightExperts) {
  HostExec ex;
  kc::check_stored_experts(ex, true);
}
TEST(DeviceKernelsHost, RmsNormAndRope) {
  HostExec ex;
  kc::check_rmsnorm_rope(ex);
}
TEST(DeviceKernelsHost, MhcWithSinkhorn) {
  HostExec ex;
  kc::check_mhc(ex);
}
TEST(DeviceKernelsHost, CompressorPool) {
  HostExec ex;
  kc::check_pool(ex);
}
TEST(DeviceKernelsHost, BatchedCompressorBodies) {
  HostExec ex;
  kc::check_compress_bodies(ex);
}
TEST(DeviceKernelsHost, TopkAndCandidateBlocks) {
  HostExec ex;
  kc::check_selection(ex);
}
// The backend's top-k unit (dk::TopkBatch): here its simple path, at the short boundary shapes.
TEST(DeviceKernelsHost, TopkBatchEqualsSelectTopk) {
  HostExec ex;
  kc::check_topk_batch(ex, false, 3);
}
// Its hints (a pool, a floor per row) with the simple path, which ignores them: the check's rows
// and floors are what the fast path's twin (DeviceKernelsCuda) relies on.
TEST(DeviceKernelsHost, TopkHintsEqualSelectTopk) {
  HostExec ex;
  kc::check_topk_hints(ex, false, 3);
}
// The done hint with the simple path, which ignores it (every row selected).
TEST(DeviceKernelsHost, TopkDoneRowsAreLeft) {
  HostExec ex;
  kc::check_topk_done(ex, false, 3);
}
// The indexer's chain (dk::IndexSelectChain) of more jobs than a Batched holds: its simple path.
TEST(DeviceKernelsHost, IndexChainInParts) {
  HostExec ex;
  kc::check_index_chain_parts(ex);
}
TEST(DeviceKernelsHost, RouterAndExperts) {
  HostExec ex;
  kc::check_moe(ex);
}
TEST(DeviceKernelsHost, Engram) {
  HostExec ex;
  kc::check_engram(ex);
}
TEST(DeviceKernelsHost, SinkAttentionAndIndexerScores) {
  HostExec ex;
  kc::check_attention_and_scores(ex);
}

TEST(DeviceKernelsHost, FakeQuantisersMatchRecordCodecs) {
  HostExec ex;
  kc::check_fake_quant(ex);
}

TEST(DeviceKernelsHost, RopeQuantFusedEqualsSeparate) {
  HostExec ex;
  kc::check_rope_quant(ex);
}
TEST(DeviceKernelsHost, RecordCodecsPackAndDecode) {
  HostExec ex;
  kc::check_record_codecs(ex);
}

TEST(DeviceKernelsHost, WindowRing) {
  HostExec ex;
  kc::check_window_ring(ex);
}
TEST(DeviceKernelsHost, WindowStore) {
  HostExec ex;
  kc::check_window_store(ex);
}

}  // namespace
}  // namespace dsv41
