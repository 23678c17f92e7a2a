// distributed/comm_hooks/default_hooks.cpp — allreduce, fp16 and bf16 compression hooks.
// Read before: distributed/comm_hooks/default_hooks.h.
#include "distributed/comm_hooks/default_hooks.h"

#include "core/native/native.h"

namespace lockstep::distributed::comm_hooks {

TensorFuture allreduce_hook(ProcessGroup& process_group, GradBucket& bucket) {
  Tensor buffer = bucket.buffer();  // (numel)
  native::binary_scalar_(native::BinaryOp::Mul, buffer, 1.0 / bucket.divisor());
  return TensorFuture::from_work(process_group.allreduce(buffer, ReduceOp::SUM), buffer);
}

namespace {

TensorFuture compress_hook(ProcessGroup& process_group, GradBucket& bucket, ScalarType wire) {
  Tensor buffer = bucket.buffer();  // (numel) in the bucket's dtype
  LS_CHECK(is_floating_point(buffer.dtype()), "DDP ", dtype_name(wire), " compression hook: bucket ",
           bucket.index(), " holds ", dtype_name(buffer.dtype()), " gradients; it compresses floating gradients only");
  native::binary_scalar_(native::BinaryOp::Mul, buffer, 1.0 / bucket.divisor());
  Tensor compressed = native::to_dtype(buffer, wire);  // (numel) in float16 / bfloat16
  return TensorFuture::from_work(process_group.allreduce(compressed, ReduceOp::SUM), compressed)
      .then([buffer](const Tensor& sum) {
        native::copy_(buffer, sum);  // decompress into the bucket
        return buffer;
      });
}

}  // namespace

TensorFuture fp16_compress_hook(ProcessGroup& process_group, GradBucket& bucket) {
  return compress_hook(process_group, bucket, kFloat16);
}

TensorFuture bf16_compress_hook(ProcessGroup& process_group, GradBucket& bucket) {
  return compress_hook(process_group, bucket, kBFloat16);
}

}  // namespace lockstep::distributed::comm_hooks
